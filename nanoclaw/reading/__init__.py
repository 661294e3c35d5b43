"""The agent's reads of the outside world, done by the host: what each agent may reach (`access`,
`tables`), the `web_read` op (`ops`), the worker program that fetches and extracts, started on first
use and gone when idle (`worker`, `client`, `extract`), and the owner's record of every fetch."""
