"""The export -> C++ inference round trip: examples/export_torchscript.py saves the fused
drop-ins as TorchScript, and the libtorch program fused_ops_infer (examples/cpp_inference)
runs them without Python; its checksums must equal what Python computes on the same input.

The binary is looked for at $FUSED_OPS_INFER, <repo>/build/examples/fused_ops_infer, then
<repo>/build*/examples/fused_ops_infer (newest first); the tests skip if it is not built.
"""

from __future__ import annotations

import glob
import os
import subprocess
import sys

import pytest
import torch

from helpers import DEVICES, REPO_DIR, requires_torchscript, torchscript_skip_reason

# The C++ program runs with --no-tf32 and Python recomputes its checksums in plain float32.
pytestmark = pytest.mark.tf32_off

EXPORT_SCRIPT = os.path.join(REPO_DIR, "examples", "export_torchscript.py")
MODELS = ["conv_transpose3d_relu_group_norm", "conv3d_group_norm_mean"]


def find_infer_binary():
    """(path, None) of the fused_ops_infer binary, or (None, why it was not found)."""
    env = os.environ.get("FUSED_OPS_INFER")
    if env:
        if os.path.isfile(env) and os.access(env, os.X_OK):
            return env, None
        return None, f"FUSED_OPS_INFER={env!r} is not an executable file"
    default = os.path.join(REPO_DIR, "build", "examples", "fused_ops_infer")
    if os.path.isfile(default):
        return default, None
    others = sorted(
        glob.glob(os.path.join(REPO_DIR, "build*", "examples", "fused_ops_infer")),
        key=os.path.getmtime,
        reverse=True,
    )
    if others:
        return others[0], None
    return None, (
        "fused_ops_infer is not built (looked at $FUSED_OPS_INFER, "
        f"{default} and {os.path.join(REPO_DIR, 'build*', 'examples', 'fused_ops_infer')}); "
        "build it with e.g. `cmake -S . -B build -G Ninja -DFUSED_OPS_BUILD_EXAMPLES=ON && "
        "ninja -C build fused_ops_infer`"
    )


INFER, INFER_MISSING = find_infer_binary()
requires_infer = pytest.mark.skipif(INFER is None, reason=INFER_MISSING or "")


def run(cmd, timeout=600):
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    assert r.returncode == 0, (
        f"{' '.join(map(str, cmd))} exited with {r.returncode}\n"
        f"stdout:\n{r.stdout}\nstderr:\n{r.stderr}"
    )
    return r.stdout


def parse_key_values(text):
    out = {}
    for line in text.splitlines():
        key, sep, value = line.partition(": ")
        if sep:
            out[key.strip()] = value.strip()
    return out


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """Both models exported by the example script (small default sizes) into a tmp dir."""
    if torchscript_skip_reason():
        pytest.skip(torchscript_skip_reason())
    d = tmp_path_factory.mktemp("exported")
    paths = {name: str(d / f"{name}.pt") for name in MODELS}
    stdout = run([sys.executable, EXPORT_SCRIPT, paths[MODELS[0]], paths[MODELS[1]]])
    for name in MODELS:
        assert f"{name}: saved TorchScript model to {paths[name]}" in stdout, stdout
        assert os.path.isfile(paths[name])
    assert stdout.count("max abs error fused vs PyTorch") == 2, stdout
    return paths


def python_checksums(model_path, shape, seed, device):
    """What the C++ program computes, in Python: the same input (CPU generator, then moved
    to the device) through the same TorchScript file (TF32 off: pytestmark above)."""
    assert not torch.backends.cudnn.allow_tf32
    module = torch.jit.load(model_path, map_location=device)
    module.eval()
    torch.manual_seed(seed)
    x = torch.rand(*shape).to(device)
    with torch.inference_mode():
        y = module(x)
    y64 = y.to("cpu", torch.float64)
    return list(y.shape), y64.sum().item(), y64.abs().sum().item()


def check_against_python(result, model_path):
    device = result["device"]
    assert device == "cpu" or device.startswith("cuda"), result
    shape = [int(s) for s in result["input_shape"].split()]
    seed = int(result["seed"])
    out_shape, s, a = python_checksums(model_path, shape, seed, device)
    assert [int(v) for v in result["output_shape"].split()] == out_shape
    assert result["output_dtype"] == "Float"
    c_sum, c_abs = float(result["checksum_sum"]), float(result["checksum_abs_sum"])
    # The same kernels on the same input: equal up to reduction order at most.
    assert c_abs == pytest.approx(a, rel=1e-5, abs=1e-6)
    assert c_sum == pytest.approx(s, rel=1e-5, abs=1e-5 * max(a, 1e-6))
    assert a > 0
    ms = float(result["ms_per_run"])
    assert ms >= 0 and int(result["timed_runs"]) >= 1


@requires_torchscript
@requires_infer
@pytest.mark.parametrize("name", MODELS)
def test_cpp_inference_matches_python(exported, name):
    # TF32 off: Python computes in plain float32 (pytestmark above).
    out = run([INFER, exported[name], "--no-tf32"])
    result = parse_key_values(out)
    assert result["tf32"] == "off"
    expected_keys = {
        "model",
        "device",
        "tf32",
        "input_shape",
        "seed",
        "output_shape",
        "output_dtype",
        "checksum_sum",
        "checksum_abs_sum",
        "warmup_runs",
        "timed_runs",
        "ms_per_run",
    }
    assert expected_keys <= set(result), out
    if torch.cuda.is_available():
        # libtorch sees the same GPUs as Python.
        assert result["device"].startswith("cuda"), out
    # The input shape stored by the export script.
    assert (
        result["input_shape"]
        == {
            "conv_transpose3d_relu_group_norm": "2 8 6 7 5",
            "conv3d_group_norm_mean": "4 3 8 9 10",
        }[name]
    )
    check_against_python(result, exported[name])


@requires_torchscript
@requires_infer
def test_cpp_inference_explicit_shape_and_seed(exported):
    name = "conv3d_group_norm_mean"
    out = run(
        [
            INFER,
            exported[name],
            "3",
            "3",
            "5",
            "6",
            "7",
            "--seed",
            "7",
            "--runs",
            "2",
            "--warmup",
            "1",
            "--no-tf32",
        ]
    )
    result = parse_key_values(out)
    assert result["input_shape"] == "3 3 5 6 7" and result["seed"] == "7"
    assert result["output_shape"] == "3"
    assert result["timed_runs"] == "2"
    check_against_python(result, exported[name])


@requires_torchscript
@requires_infer
def test_cpp_inference_cpu_device_option(exported):
    name = "conv_transpose3d_relu_group_norm"
    result = parse_key_values(run([INFER, exported[name], "--device", "cpu", "--runs", "1"]))
    assert result["tf32"] in ("on", "off")
    assert result["device"] == "cpu"
    check_against_python(result, exported[name])


@requires_infer
def test_cpp_inference_errors(tmp_path):
    r = subprocess.run([INFER], capture_output=True, text=True, timeout=120)
    assert r.returncode != 0 and "usage" in r.stderr
    r = subprocess.run(
        [INFER, str(tmp_path / "m.pt"), "--threads", "0"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 2 and "usage" in r.stderr
    r = subprocess.run(
        [INFER, str(tmp_path / "missing.pt")], capture_output=True, text=True, timeout=120
    )
    assert r.returncode != 0 and "error" in r.stderr


THREADS = 8


def check_threads(result, model_path, runs):
    """The --threads lines of one run: every thread ran its own input (seed + thread index)
    `runs` times and matched the program's single-threaded run of that input (bitwise on
    the CPU), and each thread's checksum is what Python computes for that input."""
    out = "\n".join(f"{k}: {v}" for k, v in result.items())
    assert result["threads"] == str(THREADS), out
    assert result["thread_check"] == "ok", out
    device = result["device"]
    tolerance = float(result["thread_tolerance"])
    assert tolerance == (0.0 if device == "cpu" else 1e-5), out
    shape = [int(s) for s in result["input_shape"].split()]
    seed = int(result["seed"])
    sums = []
    for t in range(THREADS):
        fields = result[f"thread_{t}"].split()
        assert fields[-1] == "ok", (t, out)
        values = dict(zip(fields[0:-1:2], fields[1:-1:2]))
        assert int(values["seed"]) == seed + t and int(values["runs"]) == runs, (t, out)
        max_abs_diff = float(values["max_abs_diff"])
        if device == "cpu":
            assert max_abs_diff == 0.0, (t, out)
        _, expected_sum, expected_abs = python_checksums(model_path, shape, seed + t, device)
        checksum = float(values["checksum_sum"])
        assert checksum == pytest.approx(expected_sum, rel=1e-5, abs=1e-5 * expected_abs), (t, out)
        sums.append(checksum)
    # Thread 0's input is the main run's, and the inputs differ (so do their outputs).
    if device == "cpu":
        assert float(result["checksum_sum"]) == sums[0]
    else:
        assert float(result["checksum_sum"]) == pytest.approx(sums[0], rel=1e-5, abs=1e-6)
    assert len(set(sums)) == THREADS, sums


@requires_torchscript
@requires_infer
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", MODELS)
def test_cpp_inference_threads_share_the_torchscript_module(exported, name, device):
    """--threads 8: eight threads run the one loaded TorchScript module at once (each on its
    own CUDA stream on a GPU) on their own inputs; every output equals the single-threaded
    run of its input."""
    runs = 3
    cmd = [INFER, exported[name], "--device", device, "--no-tf32", "--runs", str(runs)]
    result = parse_key_values(run([*cmd, "--threads", str(THREADS)]))
    assert result["device"].startswith(device), result
    check_threads(result, exported[name], runs)
    # The main run's lines are those of a run without --threads.
    single = parse_key_values(run(cmd))
    assert single["threads"] == "1" and "thread_check" not in single
    for key in ("input_shape", "output_shape", "output_dtype"):
        assert result[key] == single[key]
    for key in ("checksum_sum", "checksum_abs_sum"):
        if device == "cpu":
            assert result[key] == single[key]
        else:
            assert float(result[key]) == pytest.approx(float(single[key]), rel=1e-5, abs=1e-6)


EXPORT_AOTI_SCRIPT = os.path.join(REPO_DIR, "examples", "export_aoti.py")


@pytest.fixture(scope="module")
def aoti_packages(tmp_path_factory):
    """Both models exported with torch.export and compiled with AOTInductor for each device
    this machine has (small default sizes, the TorchScript export's seed and parameters)."""
    d = tmp_path_factory.mktemp("aoti")
    devices = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
    paths = {}
    for device in devices:
        out_dir = d / device
        stdout = run([sys.executable, EXPORT_AOTI_SCRIPT, str(out_dir), "--device", device])
        for name in MODELS:
            assert f"{name}: saved" in stdout and "outputs checked" in stdout, stdout
            paths[name, device] = str(out_dir / f"{name}.pt2")
            assert os.path.isfile(paths[name, device])
            assert os.path.isfile(out_dir / f"{name}.export.pt2")
    return paths


@requires_torchscript
@requires_infer
@pytest.mark.parametrize("name", MODELS)
def test_aoti_package_runs_in_cpp_like_torchscript(exported, aoti_packages, name):
    """The C++ program runs the AOTInductor package (no Python) and prints the checksums of the
    TorchScript model: the same kernels on the same input, on every device."""
    for (model, device), package in aoti_packages.items():
        if model != name:
            continue
        flags = ["--device", device, "--no-tf32", "--runs", "2"]
        aoti = parse_key_values(run([INFER, package, *flags]))
        script = parse_key_values(run([INFER, exported[name], *flags]))
        assert aoti["format"] == "aoti" and script["format"] == "torchscript"
        assert aoti["input_shape"] == script["input_shape"]  # from the package's metadata
        for key in ("device", "output_shape", "output_dtype"):
            assert aoti[key] == script[key], (device, key, aoti, script)
        for key in ("checksum_sum", "checksum_abs_sum"):
            if device == "cpu":  # the same kernels, bit for bit
                assert aoti[key] == script[key], (device, key, aoti, script)
            else:  # cuDNN may pick another float32 algorithm in another process
                assert float(aoti[key]) == pytest.approx(float(script[key]), rel=1e-5, abs=1e-6)


@requires_torchscript
@requires_infer
@pytest.mark.parametrize("name", MODELS)
def test_aoti_package_serves_threads(exported, aoti_packages, name):
    """--threads 8 on the AOTInductor package (one runner per thread, each thread on its own
    CUDA stream on a GPU): every output equals the single-threaded run of its input, and the
    checksums are the TorchScript model's (the same parameters) as Python computes them."""
    runs = 3
    for (model, device), package in aoti_packages.items():
        if model != name:
            continue
        flags = ["--device", device, "--no-tf32", "--runs", str(runs), "--threads", str(THREADS)]
        result = parse_key_values(run([INFER, package, *flags]))
        assert result["format"] == "aoti" and result["device"].startswith(device), result
        check_threads(result, exported[name], runs)
