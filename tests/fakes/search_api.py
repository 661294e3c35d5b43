"""Fakes of three search providers' HTTP APIs on 127.0.0.1, from their documentation (no network here).

- SearXNG (docs.searxng.org, "Search API"): GET /search?q=…&format=json. With JSON not enabled in the
  instance's `search.formats` it answers 403 Forbidden (HTML). Its answer: {"query", "number_of_results"
  (0 even with results: engines that give no count), "results": [{"url", "title", "content" (absent for
  some engines), "engine", "engines", "positions", "score", "category", "parsed_url"}], "answers",
  "corrections", "infoboxes", "suggestions", "unresponsive_engines"}.
- Brave Search API (api-dashboard.search.brave.com/docs): GET /res/v1/web/search?q=…&count=N with
  X-Subscription-Token. Answer {"type": "search", "query": {"original"}, "mixed", "web": {"type":
  "search", "results": [{"title", "url", "description" (with <strong> highlights), "age", "type":
  "search_result", …}]}}; no "web" key when nothing was found. A bad token: 422 {"type":
  "ErrorResponse", "error": {"id", "status": 422, "code": "SUBSCRIPTION_TOKEN_INVALID", "detail"}}.
- Tavily (docs.tavily.com, "Search"): POST /search, Authorization: Bearer tvly-…, {"query",
  "max_results"}. Answer {"query", "answer": null, "images": [], "results": [{"title", "url",
  "content", "score", "raw_content": null}], "response_time"}. A bad key: 401 {"detail": {"error"}}.

`results` (a list of (title, url, text)) is what every provider finds; each request is recorded.
"""
from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

BRAVE_KEY = "BSA-fake-subscription-token-0001"
TAVILY_KEY = "tvly-fake-key-0001"


class FakeSearch:
    def __init__(self):
        self.results: list[tuple[str, str, str]] = []
        self.json_enabled = True  # SearXNG's search.formats lists json
        self.requests: list[dict] = []
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def _send(self, status: int, body, content_type: str = "application/json"):
                data = body if isinstance(body, bytes) else json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self):  # noqa: N802
                parts = urlsplit(self.path)
                query = {k: v[0] for k, v in parse_qs(parts.query).items()}
                fake.requests.append({"method": "GET", "path": parts.path, "query": query, "headers": dict(self.headers)})
                if parts.path == "/search":
                    if query.get("format") != "json" or not fake.json_enabled:
                        return self._send(403, b"<html><body>403 Forbidden</body></html>", "text/html")
                    return self._send(200, {"query": query.get("q"), "number_of_results": 0, "results": [
                        {"url": url, "title": title, "engine": "duckduckgo", "engines": ["duckduckgo"], "positions": [n],
                         "score": 1.0 / n, "category": "general", "parsed_url": list(urlsplit(url)),
                         **({"content": text} if text else {})}
                        for n, (title, url, text) in enumerate(fake.results, 1)],
                        "answers": [], "corrections": [], "infoboxes": [], "suggestions": [], "unresponsive_engines": []})
                if parts.path == "/res/v1/web/search":
                    if self.headers.get("X-Subscription-Token") != BRAVE_KEY:
                        return self._send(422, {"type": "ErrorResponse", "error": {
                            "id": "f7c5d9c6", "status": 422, "code": "SUBSCRIPTION_TOKEN_INVALID",
                            "detail": "The provided subscription token is invalid."}, "time": 1765000000})
                    found = fake.results[:int(query.get("count", "20"))]
                    body = {"type": "search", "query": {"original": query.get("q"), "more_results_available": False},
                            "mixed": {"type": "mixed", "main": []}}
                    if found:
                        body["web"] = {"type": "search", "family_friendly": True, "results": [
                            {"type": "search_result", "title": title, "url": url, "is_source_local": False,
                             "description": " ".join(f"<strong>{w}</strong>" if w.lower() in query.get("q", "").lower()
                                                     else w for w in text.split()), "age": "December 1, 2026"}
                            for title, url, text in found]}
                    return self._send(200, body)
                return self._send(404, {"error": "not found"})

            def do_POST(self):  # noqa: N802
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length) or b"{}")
                fake.requests.append({"method": "POST", "path": self.path, "body": body, "headers": dict(self.headers)})
                if self.path != "/search":
                    return self._send(404, {"detail": "Not Found"})
                if self.headers.get("Authorization") != f"Bearer {TAVILY_KEY}":
                    return self._send(401, {"detail": {"error": "Unauthorized: missing or invalid API key."}})
                found = fake.results[:int(body.get("max_results") or 5)]
                return self._send(200, {"query": body.get("query"), "follow_up_questions": None, "answer": None,
                                        "images": [], "results": [
                                            {"title": title, "url": url, "content": text, "score": 0.9 - n / 100,
                                             "raw_content": None} for n, (title, url, text) in enumerate(found)],
                                        "response_time": 0.42})

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def __enter__(self):
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()
