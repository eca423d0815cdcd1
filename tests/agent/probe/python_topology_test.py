"""The trainscope Python package's parallel-layout calls over libtrainscope_probe.so, in
fold-only mode: declare_group() takes good declarations and raises ValueError with the probe's
reason for bad ones, record_p2p()/p2p() record transfers into the step (refusing a negative
peer or an op other than send/recv), init(flops_per_step=..., peak_flops=...) and set_flops()
take the work per step. What the records fold into is checked by the C++ probe tests and the
8-rank torch e2e test. No torch needed.

Env: TRAINSCOPE_PROBE_LIB (the .so), PYTHONPATH=<repo>/agent/probe/python.
"""

import sys


def check(cond, what):
    if not cond:
        print("FAILED: " + what, file=sys.stderr)
        sys.exit(1)
    print("ok: " + what)


def refused(fn, needle, what):
    try:
        fn()
    except ValueError as e:
        check(needle in str(e), "%s (%s)" % (what, e))
        return
    check(False, what + " raises ValueError")


def main():
    import trainscope

    trainscope.init(connect_agent=1, job="py-topology", rank=5, world_size=8,
                    flops_per_step=2e12, peak_flops=1e15, hardware_flops_per_step=2.5e12)
    check(trainscope.GROUP_KINDS["pp"] == trainscope.GROUP_PP == 3, "group kinds match the C ABI")

    trainscope.declare_group("tp", "tp", [4, 5])
    trainscope.declare_group("pp", trainscope.GROUP_PP, [1, 5])
    trainscope.declare_group("dp", "dp", (5, 7))
    trainscope.declare_group("tp", "tp", [4, 5])  # the same again: fine
    check(True, "good declarations are taken")
    refused(lambda: trainscope.declare_group("x", "dp", [0, 1]), "not in",
            "a group without this rank is refused")
    refused(lambda: trainscope.declare_group("x", "dp", [5, 8]), "world size 8",
            "a rank outside the world is refused")
    refused(lambda: trainscope.declare_group("x", "dp", [5, 5]), "twice",
            "a rank twice is refused")
    refused(lambda: trainscope.declare_group("x", "gpu", [5]), "group kind",
            "an unknown kind is refused")
    refused(lambda: trainscope.declare_group("x", 7, [5]), "group kind",
            "an unknown kind number is refused")
    refused(lambda: trainscope.declare_group("x", "dp", []), "empty",
            "an empty group is refused")
    trainscope.declare_group("ok-after-errors", "other", [5])
    check(True, "a good declaration after refused ones is taken")

    before = trainscope.stats()["records"]
    with trainscope.step(0):
        now = trainscope.now_ns()
        trainscope.record_p2p("recv", 1, 4096, now, now + 1000, group="pp")
        with trainscope.p2p("send", 1, 4096, group="pp"):
            pass
        trainscope.record_p2p(trainscope.COLLECTIVE_OPS["send"], 7, 16, now, now + 10)
    refused(lambda: trainscope.record_p2p("send", -1, 1, 0, 1), "peer",
            "a negative peer is refused")
    refused(lambda: trainscope.record_p2p("all_reduce", 1, 1, 0, 1), "send' or 'recv",
            "an op other than send/recv is refused")
    refused(lambda: trainscope.p2p("broadcast", 1, 1).__enter__(), "send' or 'recv",
            "the context manager refuses other ops too")
    check(trainscope.flush(5000), "the step folds")
    s = trainscope.stats()
    # step begin + end + three transfers
    check(s["records"] - before == 5, "three p2p records (got %d)" % (s["records"] - before))
    check(s["unattributed"] == 0, "the transfers fall inside their step")

    trainscope.set_flops(flops_per_step=1e12, peak_flops=9.9e14)
    refused(lambda: trainscope.set_flops(flops_per_step=-1), "flops_per_step",
            "negative FLOPs are refused")
    refused(lambda: trainscope.set_flops(peak_flops=float("inf")), "peak_flops",
            "an infinite peak is refused")
    trainscope.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
