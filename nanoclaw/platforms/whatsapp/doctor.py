"""What `doctor` checks for WhatsApp: the token can read the phone number. Nothing printed holds a secret."""
from __future__ import annotations

from .. import Finding, probe


def check(platform: dict) -> Finding | None:
    if not platform.get("WHATSAPP_TOKEN"):
        return None
    number = platform.get("WHATSAPP_PHONE_NUMBER_ID")
    if not number:
        return Finding(False, "WhatsApp", "WHATSAPP_PHONE_NUMBER_ID is not set")
    status, body = probe(f"{platform.get('WHATSAPP_API_BASE')}/{number}",
                        headers={"Authorization": f"Bearer {platform['WHATSAPP_TOKEN']}"})
    if status != 200:
        return Finding(False, "WhatsApp", f"the phone number {number} could not be read with the token ({status})")
    return Finding(True, "WhatsApp", f"{body.get('display_phone_number', number)}")
