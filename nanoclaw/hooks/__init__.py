"""Webhooks that wake an agent (issue 65, item 5): a hook the owner registers (`webhook add`), signed
deliveries verified on the raw body (`verify`, pure), kept once (`tables`: the hook and the deliveries
seen), rendered through the owner's template with every payload field marked as data (`render`), and
written as a `webhook` message into the hook's own session in its chat, whose memory is the chat's,
never a person's private one (`intake`)."""
