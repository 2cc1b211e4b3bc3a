"""Campaigns: a plan carried out in waves of fresh sessions, with its state machine on disk.

:mod:`~fleet.campaign.state` (STATE.md), :mod:`~fleet.campaign.disk` (the ``.wave/`` layout, git,
planning by headings), :mod:`~fleet.campaign.machine` (the spawn table, guards and settle branches),
:mod:`~fleet.campaign.loop` (the loop process), :mod:`~fleet.campaign.view` (the dashboard),
:mod:`~fleet.campaign.prompts` (the agents' prompts). docs/campaigns.md is the user's view.
"""
