"""Dead letters: replaying one with a fresh budget (``views`` lists them)."""

from ..errors import Refused
from ..rules.names import Actor
from ..state.deliveries import move_delivery
from ..state.history import audit
from ..state.moves import Fenced
from ..state.statuses import DeliveryStatus as D, TaskStatus as T
from ..state.tasks import maybe_written, move_task
from ..models import DeadLetter, Delivery, Task, db
from ..chores.retention import purged_at
from ..views import dead_letter_row as row, dead_letters_of


def replay(rt, letter_id, by=None, channel="cli", monitors=None):
    """Queue the dead delivery or task again with a fresh budget and the same keys.

    A task that may have been written keeps ``outcome_unknown`` and goes back as
    ``uncertain``, so its next try starts by reading the receipt. ``monitors``
    (a limited reviewer's) refuses a letter of any other monitor as unknown.
    """
    actor = Actor.of(by, channel)
    who = actor.audit
    now = rt.clock.now()
    letter = DeadLetter.get_or_none(DeadLetter.id == letter_id,
                                    *(() if monitors is None else (dead_letters_of(monitors),)))
    if letter is None:
        raise Refused("unknown_dead_letter", f"no dead letter {letter_id}")
    if letter.kind == "task" and purged_at(letter.ref) is not None:
        raise Refused("purged", "retention removed this task's result: it cannot be submitted")
    if letter.kind == "notification":
        # The notify pump (and its mail and Slack clients) loads only for a replay.
        from ..chores.notify import replay as replay_notification
        replay_notification(rt, letter, who)
        return row(DeadLetter.get_by_id(letter_id))
    # A row that died with its worker stays a suspect (see state/leases.py):
    # it is claimed alone, so it cannot take a batch down with it again.
    suspect = letter.code == "lease_expired"
    try:
        with db.atomic():
            if letter.kind == "delivery":
                delivery = Delivery.get_by_id(int(letter.ref))
                move_delivery(delivery.id, [D.DEAD], D.QUEUED, now, failures={}, next_at=now,
                              suspect=suspect, last_code=letter.code if suspect else "replayed",
                              last_reason=None)
                audit(now, "replayed", delivery.monitor, delivery.event_id, **who)
            else:
                task = Task.get_by_id(letter.ref)
                target = T.UNCERTAIN if maybe_written(task) else T.APPROVED
                move_task(task.key, [T.DEAD], target, now, failures={}, next_at=now, parked=False,
                          suspect=suspect, code=letter.code if suspect else "replayed")
                audit(now, "replayed", task.monitor, task_key=task.key, **who)
            DeadLetter.update(replayed=DeadLetter.replayed + 1).where(
                DeadLetter.id == letter_id).execute()
    except Fenced:
        raise Refused("not_dead", "this dead letter was replayed already and is in progress") from None
    rt.wakers.wake("ingest" if letter.kind == "delivery" else "submit")
    return row(DeadLetter.get_by_id(letter_id))
