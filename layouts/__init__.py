"""The layouts fleet ships (installed as ``fleet.shipped_layouts``; see :mod:`fleet.layouts`)."""
