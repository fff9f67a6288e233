"""Numeric limits shared by the environments' input checks."""

import numpy as np

# Every environment computes in float32.
FLOAT32_MAX = float(np.finfo(np.float32).max)
# Rewards are assumed to lie within this many standard deviations of their mean (Gaussian
# tails: beyond it with probability 1e-23) when checking that float32 sums stay finite.
REWARD_SDS = 10.0
