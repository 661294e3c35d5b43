"""Channel adapters: one module per platform, all of the same shape (see base.py)."""
from .base import Adapter, Card, DeliveryError, get_adapter, register
from .events import InboundEvent, ReplyTo

__all__ = ["Adapter", "Card", "DeliveryError", "InboundEvent", "ReplyTo", "get_adapter", "register"]
