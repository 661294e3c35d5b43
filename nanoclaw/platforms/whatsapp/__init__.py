"""WhatsApp (Cloud API webhooks in, Graph API out). The declaration."""
from __future__ import annotations

from .. import Platform, Setting, register

PLATFORM = register(Platform(
    name="whatsapp", label="WhatsApp",
    settings=(Setting("WHATSAPP_TOKEN", secret=True), Setting("WHATSAPP_APP_SECRET", secret=True),
              Setting("WHATSAPP_VERIFY_TOKEN", secret=True), Setting("WHATSAPP_PHONE_NUMBER_ID"),
              Setting("WHATSAPP_API_BASE", "https://graph.facebook.com/v21.0")),
    secret_prefixes=("WHATSAPP_",),
    adapter="adapter:WhatsAppAdapter",
    configured=lambda values: bool(values.get("WHATSAPP_TOKEN")),
    guess_kind=lambda _chat_id: "dm",  # the Cloud API talks one to one: a chat is a phone number
    dm_is_user=True,
    doctor="doctor:check",
), __name__)
