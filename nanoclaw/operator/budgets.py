"""Budgets, told and raised: the chat whose message waits for the budget is told once, in plain
words; the owner (or the agent's admin, as for any approval) gets a card at 80 % and at 100 %, the
latter with "raise by" buttons in the host's own namespace (`nbr-<token>:<usd>`: an agent's buttons
can never carry it). Raising needs the owner, or an admin of that agent within the owner's ceiling;
it is audited, and the agent's sessions whose messages waited are started again at once.

Setting and clearing a budget (`set_budget`, `clear_budget`) is the same rule for the CLI and the
page: audited with a why, a scoped admin only for its own agents and never above the ceiling the
owner set, which only the owner sets.
"""
from __future__ import annotations

import logging

from ..approvals.actions import NOT_HERE, NotAllowed, on_card, register_action
from ..approvals.common import display, edit_card, pick_approver, send_card
from ..channels.base import Card, get_adapter
from ..inbound import lookups
from ..lifecycle.housekeeping import register_job
from ..models import AgentGroup, Session, audit, utcnow
from ..sessions import store
from ..usage import budgets, ledger
from ..usage.tables import Budget, BudgetEvent

log = logging.getLogger("nanoclaw.budgets")

PREFIX = "nbr"
RAISES = {"day": (5, 20), "month": (20, 100)}  # USD the buttons offer


class BudgetRefused(ValueError):
    """Not allowed or not valid; the message says why."""


# --- setting -------------------------------------------------------------------------------------

def set_budget(actor: str, agent: AgentGroup, *, daily: float | None = None, monthly: float | None = None,
               ceiling_daily: float | None = None, ceiling_monthly: float | None = None,
               why: str | None = None) -> Budget:
    """Set what the agent may spend (USD); None leaves a value as it is."""
    for name, value in (("daily", daily), ("monthly", monthly), ("ceiling daily", ceiling_daily),
                        ("ceiling monthly", ceiling_monthly)):
        if value is not None and not 0 <= value <= 1_000_000:
            raise BudgetRefused(f"the {name} amount must be between 0 and 1000000 USD, not {value}")
    owner = lookups.is_owner(actor) or actor == "cli"
    if not owner and not lookups.is_owner_or_admin(actor, agent.id):
        raise BudgetRefused("you administer other agents, not this one")
    if (ceiling_daily is not None or ceiling_monthly is not None) and not owner:
        raise BudgetRefused("only the owner sets the ceiling an agent's admins cannot raise its budget past")
    row = Budget.get_or_none(Budget.agent_folder == agent.folder) or Budget(agent_folder=agent.folder)
    before = {k: getattr(row, k) for k in ("daily_usd", "monthly_usd", "ceiling_daily_usd", "ceiling_monthly_usd")}
    for field, value in (("daily_usd", daily), ("monthly_usd", monthly), ("ceiling_daily_usd", ceiling_daily),
                         ("ceiling_monthly_usd", ceiling_monthly)):
        if value is not None:
            setattr(row, field, value)
    if not owner:
        for limit, ceiling in (("daily_usd", "ceiling_daily_usd"), ("monthly_usd", "ceiling_monthly_usd")):
            cap = getattr(row, ceiling)
            if cap is not None and getattr(row, limit) is not None and getattr(row, limit) > cap:
                raise BudgetRefused(f"the owner's ceiling for the {limit.split('_')[0]} budget is ${cap:,.2f}")
    row.updated_by, row.updated_at = actor, utcnow()
    row.save(force_insert=Budget.get_or_none(Budget.agent_folder == agent.folder) is None)
    after = {k: getattr(row, k) for k in before}
    audit(actor, "budget.set", agent.folder, before=before, after=after, **({"why": why} if why else {}))
    return row


def clear_budget(actor: str, agent: AgentGroup, why: str | None = None) -> bool:
    if not (lookups.is_owner(actor) or actor == "cli"):
        raise BudgetRefused("only the owner removes an agent's budget")
    removed = Budget.delete().where(Budget.agent_folder == agent.folder).execute()
    if removed:
        audit(actor, "budget.clear", agent.folder, **({"why": why} if why else {}))
    return bool(removed)


# --- telling -------------------------------------------------------------------------------------

def chat_notice(agent: AgentGroup, event: BudgetEvent, tz: str) -> str:
    which = "daily" if event.period.startswith("day:") else "monthly"
    return (f"({agent.name} has used up its {which} budget: {budgets.usd(event.spent_micro_usd)} of "
            f"{budgets.usd(event.limit_micro_usd)}. Your message waits: it is answered when the budget "
            f"starts afresh ({budgets.resets_at(event.period, tz):%Y-%m-%d %H:%M %Z}) or as soon as the owner "
            f"raises it.)")


def card_for(agent: AgentGroup, event: BudgetEvent, tz: str) -> Card:
    kind = event.period.split(":")[0]
    which = "daily" if kind == "day" else "monthly"
    spent, limit = budgets.usd(event.spent_micro_usd), budgets.usd(event.limit_micro_usd)
    if event.kind == "warn":
        percent = round(100 * event.spent_micro_usd / max(event.limit_micro_usd, 1))
        title, body = (f"{agent.name}: {percent} % of its {which} budget",
                       f"{agent.name} has spent {spent} of its {which} budget of {limit}.")
    else:
        title, body = (f"{agent.name}'s {which} budget is used up",
                       f"{agent.name} has spent {spent} of {limit}; its model calls are refused until "
                       f"{budgets.resets_at(event.period, tz):%Y-%m-%d %H:%M %Z}, and its messages wait.")
    buttons = tuple((f"Raise by ${amount}", f"{PREFIX}-{event.token}:{amount}") for amount in RAISES[kind])
    return Card(title, body, buttons)


@register_job("budget.notices", every_s=60)  # and at once when the proxy announces an event (db.py: changes told)
def tell(settings, manager, now=None) -> int:
    """Tell what the proxy recorded: once each."""
    told = 0
    for event in BudgetEvent.select().where(BudgetEvent.told_at.is_null()).order_by(BudgetEvent.id):
        agent = AgentGroup.get_or_none(AgentGroup.folder == event.agent_folder)
        if agent is not None:
            if event.kind == "block" and event.session_id:
                _tell_chat(settings, agent, event)
            carded = BudgetEvent.select().where(
                BudgetEvent.agent_folder == event.agent_folder, BudgetEvent.period == event.period,
                BudgetEvent.kind == event.kind, BudgetEvent.card_message_id.is_null(False)).exists()
            if not carded:
                _card(settings, agent, event)
        BudgetEvent.update(told_at=utcnow()).where(BudgetEvent.id == event.id).execute()
        told += 1
    return told


def _tell_chat(settings, agent: AgentGroup, event: BudgetEvent) -> None:
    target = store.routing_of(store.session_path(settings.sessions_dir, agent.folder, event.session_id))
    if target is None:
        return
    try:
        get_adapter(target.channel_type, settings).send_text(target, chat_notice(agent, event, settings.timezone))
    except Exception as exc:  # told on the card and the page anyway
        log.warning("could not tell %s that %s's budget is spent: %s", target, agent.folder, exc)


def _card(settings, agent: AgentGroup, event: BudgetEvent) -> None:
    chosen = pick_approver(agent.id, "")
    if chosen is None:
        log.warning("nobody to tell that %s's budget is %s (no owner DM)", agent.folder, event.kind)
        return
    approver, target = chosen
    BudgetEvent.update(approver_user_id=approver, card_channel=target.channel_type,
                       card_chat_id=target.platform_id).where(BudgetEvent.id == event.id).execute()
    try:
        message_id = send_card(settings, target, card_for(agent, event, settings.timezone))
    except Exception as exc:
        log.warning("could not send the budget card of %s: %s", agent.folder, exc)
        return
    BudgetEvent.update(card_message_id=message_id).where(BudgetEvent.id == event.id).execute()


# --- raising from the card -----------------------------------------------------------------------

@register_action(PREFIX)
def raise_from_card(action, ident: str, value: str, settings, wake) -> str:
    event = BudgetEvent.get_or_none(BudgetEvent.token == ident)
    if event is None:
        return "This card is no longer active."
    if not on_card(action, event.card_channel, event.card_chat_id):
        raise NotAllowed(NOT_HERE)
    agent = AgentGroup.get_or_none(AgentGroup.folder == event.agent_folder)
    kind = event.period.split(":")[0]
    if agent is None or not value.isdigit() or int(value) not in RAISES.get(kind, ()):
        return "Unknown choice."
    if not lookups.is_owner_or_admin(action.user_id, agent.id):
        raise NotAllowed("Only the owner or an admin of this agent can raise its budget.")
    row = Budget.get_or_none(Budget.agent_folder == agent.folder)
    field = "daily_usd" if kind == "day" else "monthly_usd"
    current = getattr(row, field) if row is not None else None
    if current is None:
        return "This agent has no such budget any more."
    new = round(current + int(value), 2)
    try:
        set_budget(action.user_id, agent, **{"daily" if kind == "day" else "monthly": new},
                   why=f"raised by ${value} from the budget card")
    except BudgetRefused as exc:
        raise NotAllowed(str(exc)) from None
    edit_card(settings, event, f"{card_for(agent, event, settings.timezone).body}\n\n↑ {display(action.user_id)} "
                               f"raised the {'daily' if kind == 'day' else 'monthly'} budget to ${new:,.2f}.")
    if wake.manager is not None:
        wake.manager.budget.limits.forget()  # read the new limit at the next start, not in 2 s
    started = wake_waiting(settings, agent, wake)
    return f"Raised to ${new:,.2f}" + (f"; {started} conversation(s) go on." if started else ".")


def wake_waiting(settings, agent: AgentGroup, wake) -> int:
    """Start the agent's sessions that have messages waiting (the budget allows again)."""
    woken = 0
    for session in Session.select(Session, AgentGroup).join(AgentGroup).where(
            Session.agent_group == agent.id, Session.status == "active"):
        if store.has_due_trigger(store.session_path(settings.sessions_dir, agent.folder, session.id)):
            wake(session)
            woken += 1
    return woken


def spent_now(agent: AgentGroup, tz: str) -> ledger.Spent:
    return ledger.spent(agent.folder, ledger.today(tz))
