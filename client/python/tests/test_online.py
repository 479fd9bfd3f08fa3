"""adjsnap.run_adjoint_online: a run whose length the solver learns only when it ends, stopped at
a random step, with a toy nonlinear model whose adjoint is checked against a store-all
reference computed with the same operations (so the gradients agree bit for bit)."""
import math
import random

import numpy as np
import pytest

import adjsnap

H = 0.01


def step(x):
    """x_t = f(x_{t-1}): f(x)_i = x_i + h sin(x_{i+1}) x_i, indices cyclic."""
    return x + H * np.sin(np.roll(x, -1)) * x


def adjoint(x, lam):
    """Df(x)^T lam."""
    return lam * (1 + H * np.sin(np.roll(x, -1))) + np.roll(lam * H * x, 1) * np.cos(x)


def store_all_gradient(x0, n):
    """dJ/dx_0 for J = |x_N|^2 / 2 with every state kept."""
    xs = [x0.copy()]
    for _ in range(n):
        xs.append(step(xs[-1]))
    lam = xs[n].copy()
    for t in range(n, 0, -1):
        lam = adjoint(xs[t - 1], lam)
    return lam


class Toy:
    def __init__(self, values=1024):
        self.x = 0.1 + 0.01 * (np.arange(values) % 97).astype(np.float64)
        self.x0 = self.x.copy()
        self.lam = None
        self.forward_steps = 0
        self.reversed = []

    def advance(self, frm, to):
        for _ in range(frm, to):
            self.x[:] = step(self.x)
        self.forward_steps += to - frm

    def reverse(self, s):
        if self.lam is None:  # step N: seed with x_N = f(x_{N-1})
            self.lam = step(self.x)
        self.lam = adjoint(self.x, self.lam)
        self.reversed.append(s)


def revolve_forward_steps(n, s):
    """Revolve's offline optimum p(N, s) (x_0's slot included, first sweep included)."""
    if n <= 1:
        return 0
    t = 0
    while math.comb(s + t, s) < n:
        t += 1
    return t * n - math.comb(s + t, t - 1)


def test_run_stopped_at_a_random_step_gets_exact_adjoints(client):
    seed = random.randrange(1 << 30)
    rng = random.Random(seed)
    n, slots = rng.randint(20, 300), rng.randint(2, 8)
    toy = Toy()
    done = adjsnap.run_adjoint_online(client, "online", toy.x, toy.advance, toy.reverse,
                                      lambda s: s == n, slots=slots)
    where = f"seed {seed}: N={n} slots={slots}"
    assert toy.reversed == list(range(n, 0, -1)), where
    assert np.array_equal(toy.lam, store_all_gradient(toy.x0, n)), where
    assert done["steps"] == n, where
    assert done["forward_steps"] == toy.forward_steps, where
    assert toy.forward_steps <= revolve_forward_steps(n, slots) + (n - 1), where
    assert client.runs() == [], where


def test_local_checkpoints_need_no_daemon():
    n = 45
    toy = Toy(64)
    done = adjsnap.run_adjoint_online(None, "local", toy.x, toy.advance, toy.reverse,
                                      lambda s: s == n, slots=3, local=True)
    assert np.array_equal(toy.lam, store_all_gradient(toy.x0, n))
    assert done["steps"] == n
    assert done["writes"] > 0 and done["reads"] > 0


def test_a_callback_exception_stops_the_run_and_is_raised(client):
    toy = Toy(64)

    def is_last(s):
        if s == 7:
            raise KeyError("criterion")
        return False

    with pytest.raises(KeyError, match="criterion"):
        adjsnap.run_adjoint_online(client, "online-raises", toy.x, toy.advance, toy.reverse,
                                   is_last, slots=3)
    assert toy.forward_steps == 6
    assert client.runs() == []


def test_step_limit_stops_a_run_that_never_ends(client):
    toy = Toy(64)
    with pytest.raises(adjsnap.Error) as e:
        adjsnap.run_adjoint_online(client, "online-long", toy.x, toy.advance, toy.reverse,
                                   lambda s: False, slots=3, max_steps=20)
    assert e.value.code == "OUT_OF_RANGE"
    assert toy.forward_steps == 20
