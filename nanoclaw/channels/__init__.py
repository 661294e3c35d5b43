"""Channel adapters: one module per platform, all of the same shape (see base.py)."""
from .base import Adapter, Card, DeliveryError, InboundEvent, ReplyTo, get_adapter, register

__all__ = ["Adapter", "Card", "DeliveryError", "InboundEvent", "ReplyTo", "get_adapter", "register"]
