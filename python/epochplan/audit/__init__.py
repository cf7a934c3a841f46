"""Proof of what a run consumed: a consumption log each process appends to
(:class:`ConsumptionLog`), and an audit (:func:`audit`, ``epochplan audit``)
that certifies every sample of every step the run covered was trained on
exactly once, in its planned step, over resumes and world-size changes,
naming every violation. See the offline-plans guide."""

from __future__ import annotations

from epochplan.audit.check import AuditReport, Sighting, Violation, audit
from epochplan.audit.log import ConsumptionLog

__all__ = ["AuditReport", "ConsumptionLog", "Sighting", "Violation", "audit"]
