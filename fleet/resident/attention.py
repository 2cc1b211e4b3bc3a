"""The resident's attention: a delivery policy (:class:`fleet.seams.Policy`) named ``resident``.

What a caller may rely on (docs/resident.md): every blip of the wave's root wavelet (where the
operator and the workers' surfaces speak to the mind) goes in full, provenance aside; elsewhere (its
workers' wavelets) attention is targeted, and a worker's report — a blip starting with
:data:`DONE` — goes in full too. A worker wavelet's digest-only batch is held with no deadline: the
chatter rides with the next full blip there, so progress talk never wakes the mind alone.

Light on purpose: a resident's channel imports it (named by :mod:`fleet.features`) and nothing else
of the resident.
"""

from __future__ import annotations

from fleet import seams
from fleet.delivery.rules import Rule
from fleet.models import Blip

NAME = "resident"
"""``--attention resident``, and the resident profile's default."""

DONE = "DONE:"
"""How a worker's report that its job is done begins (the resident's fold counts the job done)."""


class ResidentAttention:
    """The policy (:class:`fleet.seams.Policy`): targeted attention's rules, then the root wavelet
    and ``DONE:`` reports in full, in the order the rules first matched before the seam."""

    def route(self, blip: Blip, participant: str, root: bool, rule: Rule) -> Rule:
        if rule is Rule.SYSTEM:
            return rule
        if root:
            return Rule.ROOT
        if rule in (Rule.OPERATOR, Rule.SURFACE):
            return rule
        if blip.text.lstrip().startswith(DONE):
            return Rule.DONE
        return rule

    def holds(self, root: bool) -> bool:
        return not root  # a worker's chatter never wakes the mind alone

    def instructions(self, participant: str) -> str:
        return f"""
Your attention on your workers' wavelets is targeted: every blip of the wave's root wavelet reaches \
you in full, but in a wavelet you forked a blip does only when it names you ("{participant}" or \
[[{participant}]]), comes from the operator, is a surface, or is a report starting with "DONE:". \
Everything else there (a worker's progress talk) is held and arrives with the next of those as one \
message of kind "digest": one line per blip with its author, the start of its text and its id in \
brackets (the ids are also in the blip_ids attribute). A digest is not a request. Read a digested \
blip in full with wavelet_read (wavelet and blip_id) only when it bears on your task.
"""


policy = ResidentAttention()
seams.policies.add(NAME, policy)
