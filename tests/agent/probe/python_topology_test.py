"""The trainscope Python package's parallel-layout calls over libtrainscope_probe.so, in
fold-only mode: declare_group() takes good declarations and raises ValueError with the probe's
reason for bad ones, record_p2p()/p2p() record transfers into the step (refusing a negative
peer or an op other than send/recv), init(flops_per_step=..., peak_flops=...) and set_flops()
take the work per step. What the records fold into is checked by the C++ probe tests and the
8-rank torch e2e test. No torch needed. Run under pytest (tests/pytest_run.py); the cases share
one probe.

Env: TRAINSCOPE_PROBE_LIB (the .so), PYTHONPATH=<repo>/agent/probe/python.
"""

import pytest


@pytest.fixture(scope="module")
def trainscope():
    import trainscope
    trainscope.init(connect_agent=1, job="py-topology", rank=5, world_size=8,
                    flops_per_step=2e12, peak_flops=1e15, hardware_flops_per_step=2.5e12)
    yield trainscope
    trainscope.shutdown()


def test_group_kinds_match_the_c_abi(trainscope):
    assert trainscope.GROUP_KINDS["pp"] == trainscope.GROUP_PP == 3, \
        "group kinds match the C ABI"


def test_good_declarations_are_taken(trainscope):
    trainscope.declare_group("tp", "tp", [4, 5])
    trainscope.declare_group("pp", trainscope.GROUP_PP, [1, 5])
    trainscope.declare_group("dp", "dp", (5, 7))
    trainscope.declare_group("tp", "tp", [4, 5])  # the same again: fine


@pytest.mark.parametrize("kind,ranks,reason", [
    ("dp", [0, 1], "not in"),        # a group without this rank
    ("dp", [5, 8], "world size 8"),  # a rank outside the world
    ("dp", [5, 5], "twice"),         # a rank twice
    ("gpu", [5], "group kind"),      # an unknown kind
    (7, [5], "group kind"),          # an unknown kind number
    ("dp", [], "empty"),             # an empty group
])
def test_bad_declarations_are_refused_with_the_probes_reason(trainscope, kind, ranks, reason):
    with pytest.raises(ValueError, match=reason):
        trainscope.declare_group("x", kind, ranks)


def test_a_good_declaration_after_refused_ones_is_taken(trainscope):
    trainscope.declare_group("ok-after-errors", "other", [5])


def test_p2p_transfers_fold_into_their_step(trainscope):
    before = trainscope.stats()["records"]
    with trainscope.step(0):
        now = trainscope.now_ns()
        trainscope.record_p2p("recv", 1, 4096, now, now + 1000, group="pp")
        with trainscope.p2p("send", 1, 4096, group="pp"):
            pass
        trainscope.record_p2p(trainscope.COLLECTIVE_OPS["send"], 7, 16, now, now + 10)
    with pytest.raises(ValueError, match="peer"):
        trainscope.record_p2p("send", -1, 1, 0, 1)  # a negative peer
    with pytest.raises(ValueError, match="send' or 'recv"):
        trainscope.record_p2p("all_reduce", 1, 1, 0, 1)  # an op other than send/recv
    with pytest.raises(ValueError, match="send' or 'recv"):
        trainscope.p2p("broadcast", 1, 1).__enter__()  # the context manager too
    assert trainscope.flush(5000), "the step folds"
    s = trainscope.stats()
    # step begin + end + three transfers
    assert s["records"] - before == 5, "three p2p records (got %d)" % (s["records"] - before)
    assert s["unattributed"] == 0, "the transfers fall inside their step"


def test_set_flops_takes_the_work_and_refuses_bad_figures(trainscope):
    trainscope.set_flops(flops_per_step=1e12, peak_flops=9.9e14)
    with pytest.raises(ValueError, match="flops_per_step"):
        trainscope.set_flops(flops_per_step=-1)
    with pytest.raises(ValueError, match="peak_flops"):
        trainscope.set_flops(peak_flops=float("inf"))
