"""FLOPs of aten ops: the registry users extend (``registry``), torch's
formulas and hookscope's conventions for ops without one (``rules``), and
hookscope's own formulas for fused kernels (``formulas``).
"""
