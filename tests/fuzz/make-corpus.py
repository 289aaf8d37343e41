#!/usr/bin/env python3
"""Writes the seed corpus of the fuzz targets into tests/fuzz/corpus/TARGET/.

Seeds are small valid inputs of each format and a few broken ones; the
fuzzer mutates them. Files this script does not make (inputs that crashed a
target once, kept as regression cases) are left alone. Run it again after
changing a format; it needs only the Python standard library:

    tests/fuzz/make-corpus.py
"""
import os
import struct
import sys
import zlib

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
CORPUS = os.path.join(HERE, "corpus")


def write(target, name, data):
    d = os.path.join(CORPUS, target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


def read(path):
    with open(os.path.join(ROOT, path), "rb") as f:
        return f.read()


# ---- protobuf, as much as the appliance's messages need ----

def varint(n):
    n &= (1 << 64) - 1
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def fv(field, v):
    """A varint field (also enums, bools, negative int32 as 10 bytes)."""
    return varint(field << 3) + varint(v)


def fb(field, b):
    """A length-delimited field: bytes, string or message."""
    if isinstance(b, str):
        b = b.encode()
    return varint(field << 3 | 2) + varint(len(b)) + b


def fd(field, x):
    return varint(field << 3 | 1) + struct.pack("<d", x)


def fpacked(field, values):
    return fb(field, b"".join(varint(v) for v in values))


# Envelope oneof numbers (proto/envelope.proto)
HELLO, AUTH_PROOF, ERROR, REGISTER = 1, 2, 3, 4
HEARTBEAT, JOB_SUBMIT, JOB_START, STEP_REPORT = 6, 10, 14, 16
STREAM_HELLO, WEIGHT_CHUNK, GRAD_CHUNK, BATCH, CREDIT = 21, 22, 23, 24, 25
EVAL_REPORT = 27

# Roles (proto/control.proto)
ROLE_COORDINATOR, ROLE_MEMORYX, ROLE_SWARMX, ROLE_WORKER, ROLE_WSE_NODE = 1, 2, 3, 4, 5


def env(case, msg):
    return fb(case, msg)


def hello(nonce_len=32, version=1):
    return fv(1, ROLE_WSE_NODE) + fb(2, "wse-node-1") + fb(3, bytes(range(nonce_len))) + fv(4, version)


def register(role=ROLE_MEMORYX, name="memoryx-1", addr="127.0.0.1:7071"):
    return fv(1, role) + fb(2, name) + fb(3, addr) + fv(5, 1 << 30) + fv(6, 2) + fv(7, 4242)


def weight_chunk(tensor, offset, count, total, step=0, pass_=0, seq=0):
    return fv(1, step) + fv(2, tensor) + fv(3, offset) + fv(4, count) + fv(5, total) + fv(6, pass_) + fv(9, seq)


def grad_chunk(tensor, offset, count, total, step=0):
    return fv(1, step) + fv(2, tensor) + fv(3, offset) + fv(4, count) + fv(5, total)


def batch(replica, n, sample_elems, label_elems, eval_batch=0, step=0):
    return fv(1, step) + fv(2, replica) + fv(3, n) + fv(4, sample_elems) + fv(5, label_elems) + fv(6, eval_batch)


def credit(n, eval_batch=0, eval_step=0):
    return fv(1, n) + fv(2, eval_batch) + fv(3, eval_step)


def stream_hello(role, index, job="job-1"):
    return fb(1, job) + fv(2, role) + fv(3, index) + fv(4, 3)


def eval_report(replica, inter, union):
    m = fb(1, "job-1") + fv(2, 10) + fv(3, replica) + fv(4, 7) + fv(5, 5) + fd(6, 3.25)
    if inter:
        m += fpacked(7, inter)
    if union:
        m += fpacked(8, union)
    return m


def plan(parent0=-1, stream=(0, 1, 2, 3), chunk_elems=5, dims=((4, 3), (4,), (2, 4), (2,)),
         replica_parent=1):
    """The fixed plan of fuzz_msgcheck.c, with one thing changed at will."""
    m = fb(1, "job-1") + fv(4, 2) + fv(6, 10) + fv(7, 8) + fv(8, chunk_elems)
    names = ["fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"]
    for i, d in enumerate(dims):
        t = fv(1, i) + fb(2, names[i % 4]) + fpacked(3, d) + fv(4, i % 2) + fv(9, 1)
        m += fb(10, t)
    for s in range(2):
        m += fb(12, fv(1, s) + fv(2, 10 + s) + fb(3, "127.0.0.1:%d" % (7100 + s)))
    m += fb(13, fv(1, 0) + fb(3, "127.0.0.1:7200") + fv(4, parent0) + fpacked(5, [1]))
    m += fb(13, fv(1, 1) + fb(3, "127.0.0.1:7201") + fv(4, 0) + fpacked(6, [0, 1, 2]))
    for r in range(3):
        m += fb(14, fv(1, r) + fv(2, 20 + r) + fv(4, 3 if r < 2 else 2) + fv(5, 3 * r) + fv(6, replica_parent))
    for w in range(4):
        m += fb(15, fv(1, w) + fv(4, w % 3) + fv(5, 1 if w == 3 else 0) + fv(6, 2 if w % 3 == 0 else 1))
    m += fpacked(18, stream) + fpacked(19, [2, 3]) + fpacked(20, [2, 3, 0, 1])
    m += fb(21, fb(1, "sgd") + fd(2, 0.1))
    m += fb(25, fb(1, "synthetic_classification"))
    m += fv(29, 20) + fv(30, 7) + fv(31, 4) + fv(32, 2)
    return m


def job_submit(toml):
    return fb(1, "job.toml") + fb(2, toml) + fv(3, 1)


# ---- frame target: flags byte, then a byte stream of frames ----

def frame(envelope, payload=b"", magic=0x50415357, version=1, header_len=None):
    hl = len(envelope) if header_len is None else header_len
    return struct.pack("<IHHII", magic, version, 0, hl, len(payload)) + envelope + payload


def floats(n):
    return b"".join(struct.pack("<f", 0.5 * i) for i in range(n))


def corpus_frame():
    hs = frame(env(HELLO, hello()))
    wc = frame(env(WEIGHT_CHUNK, weight_chunk(0, 5, 5, 12)), floats(5))
    gc = frame(env(GRAD_CHUNK, grad_chunk(2, 0, 5, 8)), floats(5))
    bt = frame(env(BATCH, batch(0, 3, 3, 1)), floats(9) + struct.pack("<3i", 0, 1, 1))
    js = frame(env(JOB_START, fb(1, plan())))
    write("frame", "hello", b"\x00" + hs)
    write("frame", "hello-bytewise", b"\x01" + hs)
    write("frame", "weight-chunk", b"\x00" + wc)
    write("frame", "weight-chunk-direct", b"\x03" + wc)
    write("frame", "stream-varied", b"\x02" + hs + wc + gc + bt)
    write("frame", "stream-direct-dest", b"\x07" + wc + gc + bt + wc)
    write("frame", "stream-refused-by-handler", b"\x80" + hs + hs + hs + hs)
    write("frame", "job-start", b"\x00" + js)
    write("frame", "bad-magic", b"\x00" + frame(env(HELLO, hello()), magic=0x12345678))
    write("frame", "bad-version", b"\x00" + frame(env(HELLO, hello()), version=9))
    write("frame", "header-too-large", b"\x00" + frame(b"", header_len=1 << 20))
    write("frame", "empty-header", b"\x00" + frame(b""))
    write("frame", "no-message", b"\x00" + frame(b"\x08\x01"))
    write("frame", "bad-protobuf", b"\x00" + frame(b"\xa2\x01\xff\xff"))
    write("frame", "truncated-payload", b"\x01" + wc[:-7])
    write("frame", "prefix-only", b"\x00" + wc[:16])


# ---- msgcheck target: payload length, variant, Envelope ----

def mc(name, case, msg, length=0, variant=0):
    write("msgcheck", name, struct.pack("<IB", length, variant) + env(case, msg))


def corpus_msgcheck():
    mc("hello", HELLO, hello())
    mc("hello-short-nonce", HELLO, hello(nonce_len=31))
    mc("hello-version", HELLO, hello(version=2))
    mc("register", REGISTER, register(), variant=ROLE_MEMORYX)
    mc("register-wrong-role", REGISTER, register(), variant=ROLE_WSE_NODE)
    mc("register-long-name", REGISTER, register(name="n" * 64), variant=ROLE_MEMORYX)
    mc("job-start", JOB_START, fb(1, plan()))
    mc("job-start-no-plan", JOB_START, b"")
    mc("job-start-parent-out-of-range", JOB_START, fb(1, plan(parent0=7)))
    mc("job-start-stream-out-of-range", JOB_START, fb(1, plan(stream=(0, 1, 2, 9))))
    mc("job-start-no-chunks", JOB_START, fb(1, plan(chunk_elems=0)))
    mc("job-start-huge-tensor", JOB_START, fb(1, plan(dims=((1 << 32, 1 << 32), (4,), (2, 4), (2,)))))
    mc("job-start-replica-parent", JOB_START, fb(1, plan(replica_parent=-1)))
    mc("weight-chunk", WEIGHT_CHUNK, weight_chunk(0, 5, 5, 12), length=20)
    mc("weight-chunk-last", WEIGHT_CHUNK, weight_chunk(0, 10, 2, 12), length=8)
    mc("weight-chunk-past-end", WEIGHT_CHUNK, weight_chunk(0, 10, 5, 12), length=20)
    mc("weight-chunk-count-wraps", WEIGHT_CHUNK, weight_chunk(0, 0, (1 << 62) + 1, 12), length=4)
    mc("grad-chunk", GRAD_CHUNK, grad_chunk(2, 0, 5, 8), length=20)
    mc("grad-chunk-bad-tensor", GRAD_CHUNK, grad_chunk(4, 0, 1, 1), length=4)
    mc("batch", BATCH, batch(0, 3, 3, 1), length=48)
    mc("batch-eval", BATCH, batch(0, 4, 3, 1, eval_batch=2), length=64)
    mc("batch-wrong-length", BATCH, batch(2, 2, 3, 1), length=31)
    mc("batch-huge-sample", BATCH, batch(1, 3, 1 << 62, 1), length=12)
    mc("credit", CREDIT, credit(4))
    mc("credit-eval", CREDIT, credit(0, eval_batch=2, eval_step=10))
    mc("credit-too-many", CREDIT, credit(65))
    mc("stream-hello-swarmx", STREAM_HELLO, stream_hello(ROLE_SWARMX, 1), variant=5)
    mc("stream-hello-replica", STREAM_HELLO, stream_hello(ROLE_WSE_NODE, 2), variant=6)
    mc("stream-hello-bad-index", STREAM_HELLO, stream_hello(ROLE_WSE_NODE, 3), variant=4)
    mc("stream-hello-worker", STREAM_HELLO, stream_hello(ROLE_WORKER, 0), variant=0)
    mc("eval-report", EVAL_REPORT, eval_report(1, [], []))
    mc("eval-report-classes", EVAL_REPORT, eval_report(2, [5, 6, 7], [9, 9, 9]))
    mc("eval-report-mismatch", EVAL_REPORT, eval_report(0, [5, 6], [9]))
    mc("job-submit", JOB_SUBMIT, job_submit(read("examples/quickstart.toml")))
    mc("job-submit-bad", JOB_SUBMIT, job_submit(b"[runconfig]\nmax_steps = -1\n"))
    mc("heartbeat", HEARTBEAT, fv(1, 3) + fv(2, 99))


# ---- TOML and job files ----

TOML_SNIPPETS = {
    "scalars": b'i = -42\nh = 0xff\no = 0o17\nb = 0b101\nf = 6.5e-3\ng = -1_000.25\n'
               b'pinf = +inf\nn = nan\nt = true\n',
    "strings": b'a = "tab\\t \\"q\\" \\u00e9 \\U0001F600"\nb = \'raw\\n\'\n'
               b'c = """\nline one\\\n  two\n"""\nd = \'\'\'\nkeep \\n\'\'\'\nnul = "x\\u0000y"\n',
    "tables": b'[a]\nx = 1\n[a.b]\ny = [1, 2, [3, "four"]]\n[[c]]\nz = {p = 1, q.r = 2}\n[[c]]\n',
    "dotted": b'site."google.com" = true\nphysical.color = "orange"\n3.14 = "pi"\n',
    "duplicate-key": b'a = 1\na = 2\n',
    "redefined-table": b'[t]\n[t]\n',
    "unterminated": b'a = "abc\n',
    "bad-utf8": b'a = "\xff\xfe"\n',
    "datetime": b'when = 1979-05-27T07:32:00Z\n',
    "deep": b"a = " + b"[" * 300 + b"]" * 300 + b"\n",
    "empty": b"",
    "bom": b"\xef\xbb\xbfk = 'v'\n",
    "crlf": b"a = 1\r\nb = '''x\r\ny'''\r\n",
}

def layer(name, type_, **kw):
    text = '[[model.layers]]\nname = "%s"\ntype = "%s"\n' % (name, type_)
    for k, v in kw.items():
        if isinstance(v, bool):
            v = "true" if v else "false"
        elif isinstance(v, str):
            v = '"%s"' % v
        elif isinstance(v, list):
            v = "[" + ", ".join('"%s"' % x if isinstance(x, str) else str(x) for x in v) + "]"
        text += "%s = %s\n" % (k, v)
    return text


# One of every layer type and most of their parameters, on a small image.
EVERY_LAYER = ("""[runconfig]
max_steps = 3
num_csx = 2
num_wgt_servers = 2
swarmx_fanout = 2
mode = "weight_streaming"
[train_input]
data_processor = "synthetic_classification"
batch_size = 4
num_classes = 3
random_flip_horizontal = true
random_crop_padding = 1
[optimizer]
optimizer_type = "adamw"
lr_schedule = "cosine"
warmup_steps = 2
[model]
input_shape = [3, 8, 8]
loss = "softmax_cross_entropy"
""" + layer("c1", "conv2d", filters=4, kernel_size=3, padding="same")
    + layer("bn", "batch_norm", momentum=0.2)
    + layer("lr", "leaky_relu", negative_slope=0.2)
    + layer("mp", "max_pool2d", kernel_size=2)
    + layer("c2", "conv2d", filters=4, kernel_size=[3, 1], stride=1, padding=[1, 0], dilation=1, bias=False)
    + layer("gn", "group_norm", groups=2)
    + layer("ge", "gelu")
    + layer("up", "upsample", scale_factor=2, mode="bilinear")
    + layer("cat", "concat", inputs=["up", "lr"])
    + layer("c3", "conv2d", filters=3, kernel_size=1)
    + layer("sum", "add", inputs=["c3", "input"])
    + layer("ct", "conv_transpose2d", filters=2, kernel_size=2, stride=2, output_padding=0)
    + layer("sg", "sigmoid")
    + layer("th", "tanh")
    + layer("ap", "avg_pool2d", kernel_size=4, stride=4)
    + layer("un", "upsample", scale_factor=2)
    + layer("dr", "dropout", rate=0.25)
    + layer("fl", "flatten")
    + layer("fc", "dense", units=3)).encode()

SEGMENTATION = ("""[runconfig]
max_steps = 2
eval_frequency = 1
[train_input]
data_processor = "synthetic_segmentation"
batch_size = 2
num_classes = 2
[eval_input]
data_processor = "synthetic_segmentation"
batch_size = 2
num_classes = 2
num_samples = 5
[model]
input_shape = [1, 8, 8]
loss = "bce_dice"
""" + layer("c", "conv2d", filters=1, kernel_size=3, padding=1) + layer("r", "relu")).encode()

JOB_FILES = ["examples/quickstart.toml", "examples/fc_mnist.toml", "examples/mnist.toml",
             "examples/resnet_small.toml", "examples/unet.toml",
             "tests/model/models/fc_mnist.toml", "tests/model/models/resnet_small.toml",
             "tests/model/models/unet.toml",
             "tests/cluster/jobs/cnn.toml", "tests/cluster/jobs/deep.toml", "tests/cluster/jobs/mlp.toml"]


def corpus_toml_and_jobs():
    for name, text in TOML_SNIPPETS.items():
        write("toml", name, text)
    for path in JOB_FILES:
        text = read(path)
        base = path.replace("/", "-").replace(".toml", "")
        write("toml", base, text)
        write("jobspec", base, text)
    quick = read("examples/quickstart.toml")
    write("jobspec", "quickstart-truncated", quick[: len(quick) // 2])
    write("jobspec", "eval-synthetic", quick + b'\n[eval_input]\ndata_processor = "synthetic_classification"\n'
                                              b'batch_size = 16\nnum_classes = 4\nnum_samples = 100\n')
    write("jobspec", "pipelined-adam", quick.replace(b'optimizer_type = "sgd"', b'optimizer_type = "adam"')
          .replace(b"[runconfig]", b'[runconfig]\nmode = "pipelined"\njob_priority = "p1"'))
    write("jobspec", "weight-streaming", quick.replace(b"[runconfig]", b'[runconfig]\nmode = "weight_streaming"'))
    write("jobspec", "bad-key", b"[runconfig]\nmax_stepz = 3\n")
    write("jobspec", "every-layer", EVERY_LAYER)
    write("toml", "every-layer", EVERY_LAYER)
    write("jobspec", "segmentation", SEGMENTATION)
    write("jobspec", "too-large", b"[train_input]\nnum_classes = 2\n[model]\ninput_shape = [16777216]\n"
                                  b"loss = \"softmax_cross_entropy\"\n"
                                  b"[[model.layers]]\nname = \"a\"\ntype = \"dense\"\nunits = 16777216\n"
                                  b"[[model.layers]]\nname = \"b\"\ntype = \"dense\"\nunits = 2\n")


# ---- YAML (params.yaml) ----

YAML_SNIPPETS = {
    "params": b"""# FC-MNIST in the layout of the Model Zoo's params.yaml
train_input: &train_input
  data_processor: MNISTDataProcessor
  data_dir: "./mnist"
  batch_size: 128
  shuffle: True
eval_input:
  <<: *train_input
  batch_size: 256
  shuffle: false
model:
  hidden_sizes: [256, 256]
  initializer:
    name: glorot_uniform
    gain: 1.0
  mixed_precision:
optimizer:
  learning_rate:
    - {scheduler: Linear, initial_learning_rate: 1e-4, total_iters: 100}
    - scheduler: Constant
      learning_rate: 1.0e-3
runconfig:
  max_steps: 10_000
""",
    "scalars": b"""b: [true, True, TRUE, yes, No, off, ON, y, n]
i: [0, -42, +12, 1_000, 0x1F, 0o17, 017, 0b101, 1:30, 9223372036854775807]
f: [1.5, -0.5, .5, 5.0e-4, 1.0E+3, 1e-4, .inf, -.Inf, .NaN, 1:30.5]
n: {a: ~, b: null, c: Null, d: NULL, e: }
s: ['quoted', "tab\\there \\u00e9 \\0", plain text, !!str 12, ! 5, '']
t: [!!int "12", !!float 3, !!bool yes]
tn: !!null ''
block: |
  literal
  text
folded: >-
  folded
  text
""",
    "merges": b"""a: &a {x: 1, y: [1, 2]}
b: &b
  y: 3
  z: {deep: [[]]}
c: {<<: [*a, *b], x: own}
d:
  w: 0
  <<: *a
e: {<<: {k: &k v}, again: *k}
&key named: 1
other: {*key : 2}
? explicit
: value
""",
    "laughs": b"""a: &a [lol, lol, lol]
b: &b [*a, *a, *a]
c: &c [*b, *b, *b]
d: &d [*c, *c, *c]
e: [*d, *d, *d]
""",
    "bad-tab-indent": b"""model:
  name: fc
\tdepth: 2
""",
}


def corpus_yaml():
    for name, text in YAML_SNIPPETS.items():
        write("yaml", name, text)


# ---- safetensors ----

def safetensors(tensors, meta=None, header_extra=b"", pad=True):
    import json
    h = {}
    data = b""
    for name, dtype, shape, raw in tensors:
        h[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    if meta:
        h["__metadata__"] = meta
    text = json.dumps(h, separators=(",", ":")).encode() + header_extra
    if pad:
        text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + data


def corpus_safetensors():
    w = floats(6)
    ok = safetensors([("fc.weight", "F32", [2, 3], w), ("fc.bias", "F32", [2], floats(2))],
                     {"step": "3", "format": "pt"})
    write("safetensors", "two-tensors", ok)
    write("safetensors", "dtypes", safetensors([("a", "F16", [2], b"\x00\x3c\x00\x40"),
                                                ("b", "I64", [1], struct.pack("<q", -5)),
                                                ("c", "U8", [3], b"\x01\x02\x03"),
                                                ("d", "BOOL", [1], b"\x01"),
                                                ("s", "F32", [], floats(1)),
                                                ("e", "F32", [0, 4], b"")]))
    write("safetensors", "empty-header", safetensors([]))
    write("safetensors", "truncated", ok[:-5])
    write("safetensors", "header-past-end", struct.pack("<Q", 1 << 20) + b"{}")
    write("safetensors", "overlap", struct.pack("<Q", 96) + (
        b'{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},'
        b'"b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}').ljust(96) + floats(2))
    write("safetensors", "escapes", safetensors([("w\u00e9ight\n", "F32", [1], floats(1))], {"k\"": "v\\"}))


# ---- IDX (MNIST) ----

def idx_images(count, rows, cols, magic=0x803):
    return struct.pack(">IIII", magic, count, rows, cols) + bytes((i * 37) % 256 for i in range(count * rows * cols))


def idx_labels(labels, magic=0x801):
    return struct.pack(">II", magic, len(labels)) + bytes(labels)


def idx_input(flags, classes, images, labels):
    return struct.pack("<BBH", flags, classes, len(images)) + images + labels


def corpus_idx():
    imgs, labs = idx_images(3, 4, 5), idx_labels([0, 9, 4])
    write("idx", "flat", idx_input(0, 10, imgs, labs))
    write("idx", "rows-cols", idx_input(1, 10, imgs, labs))
    write("idx", "image-shuffled-flipped", idx_input(2 | 4 | 16 | 32, 10, imgs, labs))
    write("idx", "eval-split", idx_input(2 | 8, 10, idx_images(1, 2, 2), idx_labels([1])))
    write("idx", "label-out-of-range", idx_input(0, 4, imgs, labs))
    write("idx", "count-mismatch", idx_input(0, 10, imgs, idx_labels([0, 1])))
    write("idx", "bad-magic", idx_input(0, 10, idx_images(1, 2, 2, magic=0x802), idx_labels([1])))
    write("idx", "header-only", idx_input(0, 10, imgs[:16], labs[:8]))
    write("idx", "truncated-images", idx_input(0, 10, imgs[:30], labs))
    write("idx", "huge-header", idx_input(0, 10, struct.pack(">IIII", 0x803, 1 << 31, 1 << 16, 1 << 16), labs))


# ---- PNG ----

def png_chunk(kind, data):
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)


def png(width, height, color, depth, rows, palette=None, interlace=0):
    """rows: the raw bytes of each scanline (without the filter byte)."""
    out = b"\x89PNG\r\n\x1a\n"
    out += png_chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, depth, color, 0, 0, interlace))
    if palette:
        out += png_chunk(b"PLTE", b"".join(bytes(c) for c in palette))
    raw = b"".join(b"\x00" + r for r in rows)
    out += png_chunk(b"IDAT", zlib.compress(raw))
    out += png_chunk(b"IEND", b"")
    return out


def png_input(flags, classes, image, mask=b""):
    return struct.pack("<BBH", flags, classes, len(image)) + image + mask


def corpus_png():
    w, h = 4, 3
    gray = png(w, h, 0, 8, [bytes((x * 60 + y) % 256 for x in range(w)) for y in range(h)])
    mask01 = png(w, h, 0, 8, [bytes((x + y) % 2 for x in range(w)) for y in range(h)])
    mask_classes = png(w, h, 0, 8, [bytes((x + y) % 3 for x in range(w)) for y in range(h)])
    rgb = png(w, h, 2, 8, [bytes((x * 40 + y * 3 + c) % 256 for x in range(w) for c in range(3)) for y in range(h)])
    rgba = png(w, h, 6, 8, [bytes((x * 9 + c) % 256 for x in range(w) for c in range(4)) for y in range(h)])
    gray16 = png(w, h, 0, 16, [b"".join(struct.pack(">H", x * 1000 + y) for x in range(w)) for y in range(h)])
    gray1 = png(w, h, 0, 1, [bytes([0b10100000]) for y in range(h)])
    gray4 = png(w, h, 0, 4, [bytes([0x1F, 0x20]) for y in range(h)])
    gray_alpha = png(w, h, 4, 8, [bytes((x * 50) % 256 for x in range(w) for c in range(2)) for y in range(h)])
    pal = png(w, h, 3, 8, [bytes((x + y) % 3 for x in range(w)) for y in range(h)],
              palette=[(0, 0, 0), (255, 0, 0), (0, 255, 0)])
    pal2 = png(w, h, 3, 2, [bytes([0b00011011]) for y in range(h)],
               palette=[(0, 0, 0), (255, 0, 0), (0, 255, 0), (0, 0, 255)])
    mask16 = png(w, h, 0, 16, [b"".join(struct.pack(">H", (x + y) % 2 * 65535) for x in range(w)) for y in range(h)])
    one_interlaced = png(1, 1, 0, 8, [b"\x80"], interlace=1)
    write("png", "gray-binary-mask", png_input(0, 2, gray, mask01))
    write("png", "gray-classes-mask", png_input(1, 3, gray, mask_classes))
    write("png", "rgb", png_input(2 | 4, 2, rgb, mask01))
    write("png", "rgba-16-bit-mask", png_input(3 | 8, 2, rgba, mask16))
    write("png", "gray16", png_input(0, 2, gray16, mask01))
    write("png", "gray1-self-mask", png_input(0, 2, gray1))
    write("png", "gray4", png_input(12, 2, gray4, mask01))
    write("png", "gray-alpha", png_input(0, 2, gray_alpha, gray_alpha))
    write("png", "palette-image-and-mask", png_input(0, 3, pal, pal))
    write("png", "palette-2-bit", png_input(0, 4, pal2, pal2))
    write("png", "interlaced", png_input(0, 2, one_interlaced))
    write("png", "label-out-of-range", png_input(0, 3, gray, gray))
    write("png", "mask-wrong-size", png_input(0, 2, gray, png(2, 2, 0, 8, [b"\x00\x01", b"\x01\x00"])))
    write("png", "rgb-mask", png_input(0, 2, rgb, rgb))
    write("png", "truncated", png_input(0, 2, gray[: len(gray) - 20], mask01))
    write("png", "bad-crc-kept", png_input(16, 2, gray[:-1] + b"\x00", mask01))


# ---- TIFF (the Inria reader) ----

def packbits(data):
    """PackBits as literal runs of at most 128 bytes."""
    out = bytearray()
    for i in range(0, len(data), 128):
        chunk = data[i:i + 128]
        out.append(len(chunk) - 1)
        out += chunk
    return bytes(out)


def tiff(width, height, samples, pixels, bits=8, photometric=None, tile=0, rows_per_strip=0,
         compression=1, planar=1, sample_format=1, big_endian=False):
    """A classic TIFF of one image. pixels(y, x, s) gives sample s of a
    pixel (as 8 bits: 16-bit files repeat it); tiles of tile x tile, or
    strips of rows_per_strip rows (0: one strip); compression 1 none,
    8 deflate, 32773 PackBits."""
    e = ">" if big_endian else "<"
    if photometric is None:
        photometric = 2 if samples >= 3 else 1
    nbytes = bits // 8
    planes = samples if planar == 2 else 1
    spp = 1 if planar == 2 else samples

    def sample_bytes(y, x, s):
        v = pixels(y, x, s) & 0xFF
        return bytes([v] * nbytes)

    chunks = []
    if tile:
        for p in range(planes):
            for ty in range(0, height, tile):
                for tx in range(0, width, tile):
                    b = bytearray()
                    for y in range(ty, ty + tile):
                        for x in range(tx, tx + tile):
                            for k in range(spp):
                                b += sample_bytes(y, x, p if planar == 2 else k) if y < height and x < width \
                                    else bytes(nbytes)
                    chunks.append(bytes(b))
    else:
        rps = rows_per_strip or height
        for p in range(planes):
            for y0 in range(0, height, rps):
                b = bytearray()
                for y in range(y0, min(height, y0 + rps)):
                    for x in range(width):
                        for k in range(spp):
                            b += sample_bytes(y, x, p if planar == 2 else k)
                chunks.append(bytes(b))
    if compression == 8:
        chunks = [zlib.compress(c) for c in chunks]
    elif compression == 32773:
        chunks = [packbits(c) for c in chunks]
    data = b"".join(chunks)
    offsets, pos = [], 8
    for c in chunks:
        offsets.append(pos)
        pos += len(c)
    extra = bytearray()  # values that do not fit an entry, after the directory's place
    entries = []

    def entry(tag, typ, values):
        size = {3: 2, 4: 4}[typ]
        raw = b"".join(struct.pack(e + ("H" if typ == 3 else "I"), v) for v in values)
        entries.append((tag, typ, len(values), raw))

    entry(256, 4, [width])
    entry(257, 4, [height])
    entry(258, 3, [bits] * samples)
    entry(259, 3, [compression])
    entry(262, 3, [photometric])
    if tile:
        entry(322, 4, [tile])
        entry(323, 4, [tile])
        entry(324, 4, offsets)
        entry(325, 4, [len(c) for c in chunks])
    else:
        entry(273, 4, offsets)
        entry(278, 4, [rows_per_strip or height])
        entry(279, 4, [len(c) for c in chunks])
    entry(277, 3, [samples])
    entry(284, 3, [planar])
    entry(339, 3, [sample_format] * samples)
    entries.sort()
    ifd = pos + (pos & 1)
    after = ifd + 2 + 12 * len(entries) + 4
    body = bytearray(struct.pack(e + "H", len(entries)))
    for tag, typ, count, raw in entries:
        body += struct.pack(e + "HHI", tag, typ, count)
        if len(raw) <= 4:
            body += raw + bytes(4 - len(raw))
        else:
            body += struct.pack(e + "I", after + len(extra))
            extra += raw
    body += struct.pack(e + "I", 0)
    head = (b"MM" if big_endian else b"II") + struct.pack(e + "HI", 42, ifd)
    return head + data + bytes(ifd - pos) + bytes(body) + bytes(extra)


def tiff_input(flags, image, mask=b""):
    return struct.pack("<BH", flags, len(image)) + image + mask


def corpus_tiff():
    w, h = 6, 5

    def img(y, x, s):
        return (x * 40 + y * 7 + s * 90) % 256

    def msk(y, x, s):
        return 255 if (x + y) % 3 == 0 else 0

    rgb = tiff(w, h, 3, img, rows_per_strip=2)
    gray = tiff(w, h, 1, img)
    mask = tiff(w, h, 1, msk, rows_per_strip=3)
    write("tiff", "rgb-strips", tiff_input(0, rgb, mask))
    write("tiff", "rgb-as-gray", tiff_input(1, rgb, mask))
    write("tiff", "gray-as-rgb-augmented", tiff_input(2, gray, mask))
    write("tiff", "rgb-tiles", tiff_input(0, tiff(20, 18, 3, img, tile=16), tiff(20, 18, 1, msk, tile=16)))
    write("tiff", "rgb-planar", tiff_input(8, tiff(w, h, 3, img, planar=2, rows_per_strip=2), mask))
    write("tiff", "rgb-planar-tiles", tiff_input(0, tiff(w, h, 3, img, planar=2, tile=16), mask))
    write("tiff", "deflate-big-endian", tiff_input(0, tiff(w, h, 3, img, compression=8, big_endian=True), mask))
    write("tiff", "packbits-by-rows", tiff_input(4, tiff(w, h, 3, img, compression=32773), mask))
    write("tiff", "rgba-standard-score", tiff_input(8 | 2, tiff(w, h, 4, img), mask))
    write("tiff", "min-is-white", tiff_input(0, tiff(w, h, 1, img, photometric=0), mask))
    write("tiff", "16-bit", tiff_input(0, tiff(w, h, 3, img, bits=16), mask))
    write("tiff", "float", tiff_input(0, tiff(w, h, 1, img, bits=32, sample_format=3), mask))
    write("tiff", "mask-wrong-size", tiff_input(0, rgb, tiff(w, h - 1, 1, msk)))
    write("tiff", "truncated", tiff_input(0, rgb[:40] + rgb[-200:], mask))


# ---- Severstal's train.csv (the rle target) ----

def corpus_rle():
    def rle_input(h, w, text):
        return bytes([h - 1, w - 1]) + text.encode()

    write("rle", "kaggle", rle_input(8, 12, "ImageId,ClassId,EncodedPixels\n"
                                     "0002cc93b.jpg,1,1 3 10 5 40 8\n"
                                     "0007a71bf.jpg,3,18 4 60 20\n"
                                     "000a4bcdd.jpg,1,-1\n"))
    write("rle", "quoted-crlf", rle_input(4, 4, "\ufeffImageId,ClassId,EncodedPixels\r\n"
                                         "\"a,b.jpg\",2,\"1 1 \"\"3\"\" 2\"\r\n\r\nc.jpg,4,\n"))
    write("rle", "columns-reordered", rle_input(3, 2, "EncodedPixels,ImageId,ClassId\n3 2,x.jpg,3\n"))
    write("rle", "malformed-runs", rle_input(3, 2, "ImageId,ClassId,EncodedPixels\n"
                                             "a.jpg,1,1 2 3\nb.jpg,1,1 x\nc.jpg,1,5 3\nd.jpg,1,0 1\n"))
    write("rle", "old-layout", rle_input(2, 2, "ImageId_ClassId,EncodedPixels\na.jpg_1,1 1\n"))


# ---- sstream target: packed weight chunks of sparse tensors ----

def corpus_sstream():
    BITMASK, POS16, POS32 = 1, 2, 3
    SPARSE, BF16, BACKWARD, CHECKPOINT, RIGL, DENSE_STREAMS, GRAD = 2, 1, 4, 8, 16, 32, 64

    def chunk(packing, flags, count, offset, kept, payload):
        return struct.pack("<BBHHH", packing, flags, count, offset, kept) + payload

    # 64 elements, 0, 9 and 63 kept: a bitmask, then three float32
    bits = bytearray(8)
    for i in (0, 9, 63):
        bits[i // 8] |= 1 << (i % 8)
    write("sstream", "bitmask", chunk(BITMASK, SPARSE, 64, 128, 3, bytes(bits) + floats(3)))
    write("sstream", "bitmask-bf16-backward",
          chunk(BITMASK, SPARSE | BF16 | BACKWARD, 64, 0, 3, bytes(bits) + b"\x80\x3f" * 3))
    write("sstream", "bitmask-nothing-kept", chunk(BITMASK, SPARSE, 20, 0, 0, bytes(4)))
    write("sstream", "bitmask-bit-past-end", chunk(BITMASK, SPARSE, 20, 0, 1, bytes([0, 0, 0x10, 0]) + floats(1)))
    write("sstream", "bitmask-bit-in-padding", chunk(BITMASK, SPARSE, 20, 0, 1, bytes([1, 0, 0, 0x80]) + floats(1)))
    write("sstream", "bitmask-count-mismatch", chunk(BITMASK, SPARSE, 64, 0, 2, bytes(bits) + floats(2)))
    pos = struct.pack("<4H", 2, 700, 4095, 0)
    write("sstream", "pos16", chunk(POS16, SPARSE, 4096, 0, 3, pos + floats(3)))
    write("sstream", "pos16-past-end", chunk(POS16, SPARSE, 4000, 96, 3, pos + floats(3)))
    write("sstream", "pos16-not-rising", chunk(POS16, SPARSE, 4096, 0, 3, struct.pack("<4H", 5, 5, 6, 0) + floats(3)))
    write("sstream", "pos16-padding", chunk(POS16, SPARSE, 4096, 0, 3, struct.pack("<4H", 5, 6, 7, 1) + floats(3)))
    write("sstream", "pos32", chunk(POS32, SPARSE | BF16, 4096, 0, 2, struct.pack("<2I", 1, 4000) + bytes(4)))
    write("sstream", "pos32-truncated", chunk(POS32, SPARSE, 4096, 0, 2, struct.pack("<2I", 1, 4000) + floats(1)))
    write("sstream", "dense-tensor-packed", chunk(BITMASK, 0, 64, 0, 3, bytes(bits) + floats(3)))
    write("sstream", "checkpoint-packed", chunk(BITMASK, SPARSE | CHECKPOINT, 64, 0, 3, bytes(bits) + floats(3)))
    write("sstream", "dense", chunk(0, SPARSE, 4, 8, 0, floats(4)))
    write("sstream", "unknown-packing", chunk(5, SPARSE, 4, 8, 1, floats(1)))
    write("sstream", "dense-streams-packed", chunk(BITMASK, SPARSE | DENSE_STREAMS, 64, 0, 3, bytes(bits) + floats(3)))
    write("sstream", "grad-bitmask", chunk(BITMASK, SPARSE | GRAD, 64, 64, 3, bytes(bits) + floats(3)))
    write("sstream", "grad-pos16-bf16", chunk(POS16, SPARSE | GRAD | BF16, 4096, 0, 3, pos + bytes(6)))
    write("sstream", "grad-rigl-packed", chunk(BITMASK, SPARSE | GRAD | RIGL, 64, 0, 3, bytes(bits) + floats(3)))
    write("sstream", "weights-rigl-packed", chunk(BITMASK, SPARSE | RIGL, 64, 0, 3, bytes(bits) + floats(3)))


# ---- render target: the coordinator's answers to appliance-submit ----

CLUSTER_INFO, JOB_ACCEPTED, JOB_STATUS, JOB_LIST, JOB_LOG_LINES = 9, 11, 13, 30, 32


def job_status(state, step=0, max_steps=100, eta=-1.0, elapsed=0.0, accuracy=-1.0, iou=-1.0,
               position=0, submitted=1.7e9):
    return (fb(1, "job-7") + fv(2, state) + fv(3, step) + fv(4, max_steps) + fd(5, 0.693) +
            fb(6, "model_dir/x") + fb(7, "done") + fd(8, 812.5) + fd(9, elapsed) + fb(10, "training") +
            fv(11, step) + fd(12, 0.5) + fd(13, accuracy) + fd(14, iou) + fb(15, "job.toml") +
            fv(16, 2) + fv(17, position) + fd(18, submitted) + fd(19, eta) + fd(20, 0.01))


def corpus_render():
    member = fv(1, 1) + fv(2, ROLE_WSE_NODE) + fb(3, "wse-node-1") + fb(4, "127.0.0.1:7001") + fv(5, 1) + \
        fv(6, 40 << 30) + fv(8, 2) + fv(9, 120) + fb(10, "job-7") + fb(11, "127.0.0.1:5555")
    write("render", "cluster", env(CLUSTER_INFO, fb(1, member) + fb(1, member.replace(b"wse-node-1", b'q"\\\x01'))))
    layer_msg = fb(1, "fc1") + fb(2, "dense") + fpacked(3, [4]) + fv(4, 16) + fv(5, 16) + fv(6, 40)
    accepted_plan = plan() + fb(11, layer_msg) + fb(3, "job.toml")
    write("render", "plan", env(JOB_ACCEPTED, fb(1, "plan") + fb(2, accepted_plan)))
    write("render", "accepted", env(JOB_ACCEPTED, fb(1, "job-7")))
    write("render", "status-queued", env(JOB_STATUS, job_status(1, position=3)))
    write("render", "status-running", env(JOB_STATUS, job_status(2, step=40, eta=4000.0, elapsed=75.0)))
    write("render", "status-done", env(JOB_STATUS, job_status(3, step=100, elapsed=3.5, accuracy=0.95)))
    write("render", "status-done-iou", env(JOB_STATUS, job_status(3, step=100, iou=0.7)))
    write("render", "status-failed", env(JOB_STATUS, job_status(4, step=12)))
    # durations that once went through (int): not a number, and the ETA of max_steps = 1e12
    write("render", "crash-duration-nan", env(JOB_STATUS, job_status(2, step=1, eta=float("nan"))))
    write("render", "crash-eta-beyond-int", env(JOB_STATUS, job_status(2, step=10, max_steps=10 ** 12,
                                                                       eta=1e11, elapsed=60.0)))
    write("render", "crash-submitted-far-future", env(JOB_LIST, fb(1, job_status(3, submitted=1e300))))
    write("render", "list", env(JOB_LIST, fb(1, job_status(3)) + fb(1, job_status(1, position=1))))
    write("render", "log-lines", env(JOB_LOG_LINES, fb(1, "job-7") + fv(2, 4) + fb(3, "line one") +
                                     fb(3, "tab\there") + fv(4, 1)))


def main():
    corpus_render()
    corpus_frame()
    corpus_msgcheck()
    corpus_toml_and_jobs()
    corpus_yaml()
    corpus_safetensors()
    corpus_idx()
    corpus_png()
    corpus_tiff()
    corpus_rle()
    corpus_sstream()
    total = 0
    for d, _, files in os.walk(CORPUS):
        total += sum(os.path.getsize(os.path.join(d, f)) for f in files)
    print("corpus: %d bytes in %s" % (total, CORPUS))
    return 0


if __name__ == "__main__":
    sys.exit(main())
