"""The median step time of a job from appliance-submit's progress lines
(logged every step: runconfig.log_steps = 1), and the IoU of each
evaluation. Reads the client's output on stdin; prints
"median_step_sec last_iou" and the IoU curve on stderr.
    step_times.py [--skip N] [--log COORDINATOR_LOG]
--skip N: the first N steps are warm-up, not counted. The client prints
whole seconds past a minute; --log takes the steps' times from the
coordinator's log instead, to the millisecond."""
import datetime
import re
import statistics
import sys


def sec(d):  # durations as the client prints them: 12.3s, 5m12s, 1h02m
    h, m, s = re.fullmatch(r"(?:(\d+)h)?(?:(\d+)m)?(?:([0-9.]+)s)?", d).groups()
    return int(h or 0) * 3600 + int(m or 0) * 60 + float(s or 0)


def logged(path):  # step -> seconds, from "<time>Z INFO coordinator: job J: step N/M loss"
    el = {}
    for t, s in re.findall(r"^(\S+)Z INFO coordinator: job \S+: step (\d+)/\d+ loss", open(path).read(), re.M):
        el[int(s)] = datetime.datetime.strptime(t, "%Y-%m-%dT%H:%M:%S.%f").timestamp()
    return el


def main():
    args = sys.argv[1:]
    skip = int(args[args.index("--skip") + 1]) if "--skip" in args else 0
    text = sys.stdin.read()
    el = {int(s): sec(e) for s, e in re.findall(
        r"step (\d+)/\d+ \([0-9]+%\) loss [0-9.]+ .* elapsed ([0-9hms.]+) ETA", text)}
    if "--log" in args:
        el = logged(args[args.index("--log") + 1])
    ks = sorted(k for k in el if k > skip)
    d = [el[b] - el[a] for a, b in zip(ks, ks[1:]) if b == a + 1]
    iou = re.findall(r"eval at step (\d+): loss [0-9.]+, IoU ([0-9.]+)", text)
    if len(iou) > 1:
        print("IoU by step: " + ", ".join("%s: %s" % p for p in iou), file=sys.stderr)
    print(statistics.median(d) if d else float("nan"), iou[-1][1] if iou else "nan")


if __name__ == "__main__":
    main()
