// The web chat without reloads: send with fetch, poll for new and changed lines.
// Everything the agent wrote goes in with textContent, never as HTML.
(function () {
  "use strict";
  var root = document.getElementById("chat");
  if (!root) return;
  var list = document.getElementById("messages");
  var form = document.getElementById("send");
  var input = document.getElementById("text");
  var files = document.getElementById("file");
  var status = document.getElementById("status");
  var csrf = form.querySelector("input[name=csrf_token]").value;
  var after = parseInt(root.dataset.after || "0", 10);
  var cursor = root.dataset.cursor || "";
  var waitingSince = 0;
  var POLL_MS = 1000;

  function el(tag, cls, text) {
    var node = document.createElement(tag);
    if (cls) node.className = cls;
    if (text !== undefined && text !== null) node.textContent = text;
    return node;
  }

  function localTime(iso) {
    var d = new Date(iso);
    return isNaN(d) ? "" : d.toLocaleString([], {hour: "2-digit", minute: "2-digit"});
  }

  function actionForm(label, actionId, messageId) {
    var f = el("form", "card-action");
    f.method = "post";
    f.action = root.dataset.actionUrl;
    [["csrf_token", csrf], ["action_id", actionId], ["message_id", "web-" + messageId]].forEach(function (kv) {
      var i = el("input");
      i.type = "hidden"; i.name = kv[0]; i.value = kv[1];
      f.appendChild(i);
    });
    var b = el("button", null, label);
    b.type = "submit";
    f.appendChild(b);
    return f;
  }

  function render(m) {
    var li = el("li", "msg " + m.direction);
    li.dataset.id = m.id;
    var who = el("div", "who", m.direction === "out" ? root.dataset.agentName : (m.sender || "You"));
    who.appendChild(document.createTextNode(" "));
    who.appendChild(el("time", null, localTime(m.at)));
    li.appendChild(who);
    if (m.card) li.appendChild(el("div", "card-title", m.card.title));
    li.appendChild(el("div", "text", m.text));
    if (m.file) {
      var a = el("a", "file", m.file);
      a.href = root.dataset.fileUrl + m.id;
      li.appendChild(a);
    }
    if (m.card && m.card.buttons && m.card.buttons.length) {
      var buttons = el("div", "buttons");
      m.card.buttons.forEach(function (b) { buttons.appendChild(actionForm(b[0], b[1], m.id)); });
      li.appendChild(buttons);
    }
    if (m.reactions && m.reactions.length) li.appendChild(el("div", "reactions", m.reactions.join(" ")));
    return li;
  }

  function show(m) {
    var fresh = render(m);
    var old = list.querySelector('li[data-id="' + m.id + '"]');
    if (old) { list.replaceChild(fresh, old); return; }
    list.appendChild(fresh);
    fresh.scrollIntoView({block: "end"});
    if (m.direction === "out") { waitingSince = 0; status.textContent = ""; }
  }

  function poll() {
    var url = root.dataset.messagesUrl + "?after=" + after + "&since=" + encodeURIComponent(cursor);
    fetch(url, {headers: {"Accept": "application/json"}, credentials: "same-origin"})
      .then(function (r) {
        if (r.status === 401) { window.location.reload(); throw new Error("logged out"); }
        return r.json();
      })
      .then(function (data) {
        cursor = data.cursor;
        data.messages.forEach(function (m) { show(m); if (m.id > after) after = m.id; });
        if (waitingSince && Date.now() - waitingSince > 3000) status.textContent = root.dataset.agentName + " is working…";
      })
      .catch(function () { /* next tick tries again */ })
      .then(function () { setTimeout(poll, POLL_MS); });
  }

  form.addEventListener("submit", function (ev) {
    ev.preventDefault();
    var text = input.value.trim();
    var attached = files && files.files.length;
    if (!text && !attached) return;
    var body = new FormData(form);
    input.value = "";
    if (files) { files.value = ""; showAttached(); }
    fetch(form.action, {method: "POST", body: body, headers: {"Accept": "application/json"}, credentials: "same-origin"})
      .then(function (r) { return r.json().then(function (data) { return [r.ok, data]; }); })
      .then(function (res) {
        if (!res[0]) { status.textContent = res[1].error || "Not sent."; input.value = text; return; }
        (res[1].messages || [res[1].message]).forEach(function (m) { show(m); if (m.id > after) after = m.id; });
        waitingSince = Date.now();
        status.textContent = res[1].note || "";
      })
      .catch(function () { status.textContent = "Not sent (connection problem)."; input.value = text; });
  });

  function showAttached() {  // the file input is hidden behind its label: say what is attached
    var label = files && files.parentNode.querySelector("span");
    if (!label) return;
    var n = files.files.length;
    label.textContent = n === 0 ? "Attach" : n === 1 ? files.files[0].name : n + " files";
  }
  if (files) files.addEventListener("change", showAttached);

  input.addEventListener("keydown", function (ev) {  // Enter sends, Shift+Enter is a new line
    if (ev.key === "Enter" && !ev.shiftKey) { ev.preventDefault(); form.requestSubmit(); }
  });

  list.addEventListener("submit", function (ev) {
    var f = ev.target;
    if (!f.classList.contains("card-action")) return;
    ev.preventDefault();
    fetch(f.action, {method: "POST", body: new FormData(f), headers: {"Accept": "application/json"}, credentials: "same-origin"})
      .then(function (r) { return r.json(); })
      .then(function (data) { status.textContent = data.text || ""; })
      .catch(function () { status.textContent = "That button did not go through; try again."; });
  });

  var last = list.lastElementChild;
  if (last) last.scrollIntoView({block: "end"});
  setTimeout(poll, POLL_MS);
})();
