"""What an agent reads from outside, fetched by the host: the one address check the install uses
(`addresses`, shared with the proxy's egress), URLs that would carry a secret out (`url_secrets`),
the fetcher that connects only to the address it checked (`fetch`), and the envelope everything
read arrives in, marked as data (`envelope`)."""
