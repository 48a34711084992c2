"""PagedAttention kernels in Triton, each beside its pure-torch reference.

Installed as ``pagedkit.kernels`` (see pyproject's package-dir). This file
stays free of imports on purpose: when Python runs from the repository root
this folder is also visible as a top-level ``kernels``, a name transformers
probes for (a PyPI package of that name exists), and an empty, version-less
module makes that probe answer "not installed" without side effects.
Import the kernels through `pagedkit.ops`, or a module directly, e.g.
``pagedkit.kernels.paged_decode``.
"""
