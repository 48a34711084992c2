"""PagedAttention kernels in Triton, each beside its pure-torch reference.

This file stays free of imports: ``import pagedkit.kernels`` costs nothing
until a kernel is used. Import the kernels through `pagedkit.ops`, or a
module directly, e.g. ``pagedkit.kernels.paged_decode``.
"""
