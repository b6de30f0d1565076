// fused_ops_infer: runs a model that uses the fused operators, from C++ only (libtorch +
// libfused_ops.so, no Python), in either of PyTorch's C++ deployment formats:
//
//   fused_ops_infer <model.pt | model.pt2> [N C D H W] [--runs K] [--warmup K] [--seed S]
//                   [--device cpu|cuda] [--no-tf32] [--threads T]
//
// * model.pt: TorchScript, saved by examples/export_torchscript.py (torch.jit.script + save;
//   deprecated from PyTorch 2.14 on, but torch::jit::load still runs it);
// * model.pt2: an AOTInductor package, saved by examples/export_aoti.py (torch.export +
//   torch._inductor.aoti_compile_and_package), run by torch::inductor::AOTIModelPackageLoader.
//   Its fused operators run through the package's proxy executor, which finds them in the
//   dispatcher: libfused_ops.so is linked (and so loaded) before the package is. A package is
//   compiled for one device (--device must match it).
//
// The input shape comes from the command line or, if not given there, from the "input_shape"
// extra file (TorchScript) or metadata entry (AOTInductor) that the export scripts store in
// the model. The input is
//   torch::manual_seed(seed); torch::rand({N, C, D, H, W})   (float32, on the CPU)
// moved to the device, so Python reproduces it with
//   torch.manual_seed(seed); torch.rand(N, C, D, H, W)
// The device is CUDA when torch::cuda::is_available(), else the CPU (or --device).
// --no-tf32 turns TF32 off for cuDNN convolutions and cuBLAS (libtorch, like PyTorch, allows
// TF32 in cuDNN convolutions by default), e.g. to compare checksums with float32 exactly.
//
// Prints one "key: value" line each: model, format (torchscript or aoti), device, tf32,
// input_shape, seed, output_shape, output_dtype, checksum_sum, checksum_abs_sum (sums of the output
// and of its absolute values, in double), warmup_runs, timed_runs, ms_per_run, threads.
//
// --threads T (T > 1) then checks that the loaded model can serve several threads at once: T
// threads share the one loaded model (the TorchScript module, or the AOTInductor package with
// T runners so that the threads need not queue for one), each on its own CUDA stream from
// PyTorch's pool when on CUDA. Thread t runs its own input, the one --seed S + t gives, --runs K
// times; every output is compared with a run of the same input made beforehand on the main
// thread alone: bitwise on the CPU (the CPU kernels are deterministic for any thread count),
// within 1e-5 of the largest magnitude on CUDA (cuDNN may pick another float32 algorithm on
// another thread). Prints thread_tolerance, thread_<t> (seed, runs, max_abs_diff,
// checksum_sum, ok or MISMATCH), thread_check (ok or FAILED) and threads_wall_ms, and exits
// with 1 if any output differs (or a thread failed).
#include <torch/csrc/inductor/aoti_package/model_package_loader.h>
#include <torch/cuda.h>
#include <torch/script.h>
#include <torch/torch.h>

#include <ATen/Parallel.h>
#include <c10/core/StreamGuard.h>
#include <c10/core/impl/VirtualGuardImpl.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <iostream>
#include <latch>
#include <limits>
#include <memory>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace {

struct Options {
  std::string model_path;
  std::vector<int64_t> input_shape;  // empty: from the model's extra file
  int runs = 10;
  int warmup = 3;
  uint64_t seed = 0;
  std::string device;  // empty: cuda if available, else cpu
  bool no_tf32 = false;
  int threads = 1;  // > 1: the concurrency check (see the top of this file)
};

[[noreturn]] void usage(const char* argv0, const std::string& error) {
  if (!error.empty()) {
    std::cerr << "error: " << error << "\n";
  }
  std::cerr << "usage: " << argv0
            << " <model.pt | model.pt2> [N C D H W] [--runs K] [--warmup K] [--seed S]"
               " [--device cpu|cuda]"
               " [--no-tf32] [--threads T]\n";
  std::exit(2);
}

int64_t parse_int(const char* argv0, const std::string& text, int64_t min_value) {
  try {
    size_t used = 0;
    const long long v = std::stoll(text, &used);
    if (used != text.size() || v < min_value) {
      throw std::invalid_argument(text);
    }
    return v;
  } catch (const std::exception&) {
    usage(argv0, "expected an integer >= " + std::to_string(min_value) + ", got '" + text + "'");
  }
}

Options parse_args(int argc, char** argv) {
  Options opt;
  std::vector<std::string> positional;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) usage(argv[0], arg + " needs a value");
      return argv[++i];
    };
    if (arg == "-h" || arg == "--help") {
      usage(argv[0], "");
    } else if (arg == "--runs") {
      opt.runs = static_cast<int>(parse_int(argv[0], value(), 1));
    } else if (arg == "--warmup") {
      opt.warmup = static_cast<int>(parse_int(argv[0], value(), 0));
    } else if (arg == "--seed") {
      opt.seed = static_cast<uint64_t>(parse_int(argv[0], value(), 0));
    } else if (arg == "--no-tf32") {
      opt.no_tf32 = true;
    } else if (arg == "--threads") {
      const int64_t threads = parse_int(argv[0], value(), 1);
      if (threads > 1024) usage(argv[0], "--threads: at most 1024");
      opt.threads = static_cast<int>(threads);
    } else if (arg == "--device") {
      opt.device = value();
      if (opt.device != "cpu" && opt.device != "cuda") usage(argv[0], "--device: cpu or cuda");
    } else if (arg.size() > 1 && arg[0] == '-' && !(arg[1] >= '0' && arg[1] <= '9')) {
      usage(argv[0], "unknown option " + arg);
    } else {
      positional.push_back(arg);
    }
  }
  if (positional.empty()) usage(argv[0], "missing <model.pt>");
  opt.model_path = positional[0];
  if (positional.size() != 1 && positional.size() != 6) {
    usage(argv[0], "expected the model path, optionally followed by the 5 sizes N C D H W");
  }
  for (size_t i = 1; i < positional.size(); ++i) {
    opt.input_shape.push_back(parse_int(argv[0], positional[i], 0));
  }
  return opt;
}

std::vector<int64_t> parse_shape(const std::string& text) {
  std::istringstream in(text);
  std::vector<int64_t> shape;
  int64_t v;
  while (in >> v) shape.push_back(v);
  if (!in.eof() || shape.size() != 5) {
    throw std::runtime_error("the model's input_shape extra file is not 5 integers: '" + text +
                             "'");
  }
  return shape;
}

std::string join(c10::IntArrayRef sizes) {
  std::ostringstream s;
  for (size_t i = 0; i < sizes.size(); ++i) {
    if (i) s << ' ';
    s << sizes[i];
  }
  return s.str();
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

void synchronize(const torch::Device& device) {
  if (device.is_cuda()) torch::cuda::synchronize();
}

// The input of seed `seed`: what Python's torch.manual_seed(seed); torch.rand(shape) gives,
// moved to the device.
torch::Tensor make_input(c10::IntArrayRef shape, uint64_t seed, const torch::Device& device) {
  torch::manual_seed(seed);
  return torch::rand(shape, torch::kFloat32).to(device);
}

// What one thread of the --threads check saw.
struct ThreadResult {
  uint64_t seed = 0;
  int runs = 0;             // outputs compared
  int mismatched_runs = 0;  // of those, outside the tolerance (or of another shape)
  double max_abs_diff = 0.0;
  double checksum_sum = 0.0;  // of its last output
  std::string error;          // what it threw, if it did
  bool ok() const { return error.empty() && runs > 0 && mismatched_runs == 0; }
};

// The --threads check (see the top of this file). `forward` is called from every thread at
// once; `input0` is the main run's input (seed opt.seed). Prints its lines; returns whether
// every thread's every output matched the single-threaded run of its input.
bool check_threads(const std::function<torch::Tensor(const torch::Tensor&)>& forward,
                   const Options& opt, const torch::Device& device, const torch::Tensor& input0) {
  const int n = opt.threads;
  // Inputs are drawn on this thread (the default generator is shared), one seed per thread,
  // and each is run here alone first: the expected outputs.
  std::vector<torch::Tensor> inputs;
  std::vector<torch::Tensor> expected;
  for (int t = 0; t < n; ++t) {
    inputs.push_back(t == 0 ? input0 : make_input(input0.sizes(), opt.seed + t, device));
    expected.push_back(forward(inputs.back()).clone());
  }
  // The threads' streams must see these tensors complete.
  synchronize(device);
  const double tolerance = device.is_cuda() ? 1e-5 : 0.0;  // of the largest |expected|

  std::vector<ThreadResult> results(n);
  std::latch start(n + 1);
  std::vector<std::thread> threads;
  threads.reserve(n);
  for (int t = 0; t < n; ++t) {
    threads.emplace_back([&, t]() {
      ThreadResult& r = results[t];
      r.seed = opt.seed + t;
      bool waited = false;
      try {
        // A new thread starts with OpenMP's default thread count, not the one the process
        // set (PyTorch's own worker threads call this too).
        at::init_num_threads();
        // Thread-local, as the main thread's guard.
        c10::InferenceMode inference_mode;
        // Its own stream from PyTorch's CUDA stream pool: c10's device-generic guard reaches
        // it through the CUDA guard implementation (c10::cuda::getStreamFromPool and
        // CUDAStreamGuard), and keeps this program buildable against a CPU-only libtorch.
        std::optional<c10::StreamGuard> stream_guard;
        if (device.is_cuda()) {
          const c10::impl::VirtualGuardImpl impl(device.type());
          stream_guard.emplace(impl.getStreamFromGlobalPool(device));
        }
        const torch::Tensor& want = expected[t];
        const double scale = want.numel() > 0 ? want.abs().max().item<double>() : 0.0;
        start.arrive_and_wait();  // all threads run at once
        waited = true;
        for (int i = 0; i < opt.runs; ++i) {
          const torch::Tensor got = forward(inputs[t]);
          ++r.runs;
          if (got.sizes() != want.sizes() || got.scalar_type() != want.scalar_type()) {
            ++r.mismatched_runs;
            r.max_abs_diff = std::numeric_limits<double>::infinity();
            continue;
          }
          const double diff =
              (got.to(torch::kFloat64) - want.to(torch::kFloat64)).abs().max().item<double>();
          r.max_abs_diff = std::max(r.max_abs_diff, diff);
          const bool same = tolerance == 0.0 ? torch::equal(got, want)
                                             : diff <= tolerance * scale;  // false for NaN
          if (!same) ++r.mismatched_runs;
          r.checksum_sum = got.to(torch::kFloat64).sum().item<double>();
        }
        if (device.is_cuda()) stream_guard->current_stream().synchronize();
      } catch (const c10::Error& e) {
        r.error = e.what_without_backtrace();
      } catch (const std::exception& e) {
        r.error = e.what();
      }
      if (!waited) start.count_down();  // failed before the start: do not hold the others
    });
  }
  const auto begin = std::chrono::steady_clock::now();
  start.arrive_and_wait();
  for (auto& thread : threads) thread.join();
  const auto end = std::chrono::steady_clock::now();

  int failed = 0;
  std::printf("thread_tolerance: %.3g\n", tolerance);
  for (int t = 0; t < n; ++t) {
    const ThreadResult& r = results[t];
    if (!r.ok()) ++failed;
    std::printf("thread_%d: seed %llu runs %d max_abs_diff %.17g checksum_sum %.17g %s\n", t,
                static_cast<unsigned long long>(r.seed), r.runs, r.max_abs_diff, r.checksum_sum,
                r.ok() ? "ok" : "MISMATCH");
    if (!r.error.empty()) {
      std::cerr << "error: thread " << t << " failed: " << r.error << "\n";
    } else if (!r.ok()) {
      std::cerr << "error: thread " << t << " (seed " << r.seed << "): " << r.mismatched_runs
                << " of " << r.runs
                << " outputs differ from the single-threaded run of the same input "
                   "(max abs diff "
                << r.max_abs_diff << ", tolerance " << tolerance << " of the largest |output|)\n";
    }
  }
  if (failed == 0) {
    std::printf("thread_check: ok\n");
  } else {
    std::printf("thread_check: FAILED (%d of %d threads)\n", failed, n);
  }
  std::printf("threads_wall_ms: %.4f\n",
              std::chrono::duration<double, std::milli>(end - begin).count());
  return failed == 0;
}

}  // namespace

int main(int argc, char** argv) {
  const Options opt = parse_args(argc, argv);
  try {
    const bool use_cuda = opt.device.empty() ? torch::cuda::is_available() : opt.device == "cuda";
    if (use_cuda && !torch::cuda::is_available()) {
      throw std::runtime_error("--device cuda: no CUDA device available to libtorch");
    }
    const torch::Device device = use_cuda ? torch::Device(torch::kCUDA, 0) : torch::kCPU;
    if (opt.no_tf32) {
      at::globalContext().setAllowTF32CuDNN(false);
      at::globalContext().setAllowTF32CuBLAS(false);
    }

    // The model, as a function of its input, and the input shape it stores.
    std::function<torch::Tensor(const torch::Tensor&)> forward;
    std::string stored_shape;
    const bool aoti = ends_with(opt.model_path, ".pt2");
    std::unique_ptr<torch::inductor::AOTIModelPackageLoader> package;
    torch::jit::Module module;
    if (aoti) {
      // One runner per --threads thread: a runner serves one call at a time.
      package = std::make_unique<torch::inductor::AOTIModelPackageLoader>(
          opt.model_path, "model", /*run_single_threaded=*/false, static_cast<size_t>(opt.threads));
      const auto metadata = package->get_metadata();
      const auto it = metadata.find("input_shape");
      if (it != metadata.end()) stored_shape = it->second;
      forward = [&](const torch::Tensor& x) { return package->run({x}).at(0); };
    } else {
      torch::jit::ExtraFilesMap extra_files{{"input_shape", ""}};
      module = torch::jit::load(opt.model_path, device, extra_files);
      module.eval();
      stored_shape = extra_files["input_shape"];
      forward = [&](const torch::Tensor& x) {
        return module.forward(std::vector<torch::jit::IValue>{x}).toTensor();
      };
    }

    std::vector<int64_t> shape = opt.input_shape;
    if (shape.empty()) {
      if (stored_shape.empty()) {
        throw std::runtime_error(
            "no input shape: give N C D H W on the command line (the model stores none)");
      }
      shape = parse_shape(stored_shape);
    }

    const torch::Tensor input = make_input(shape, opt.seed, device);

    c10::InferenceMode inference_mode;
    torch::Tensor output;
    for (int i = 0; i < opt.warmup; ++i) {
      output = forward(input);
    }
    synchronize(device);
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < opt.runs; ++i) {
      output = forward(input);
    }
    synchronize(device);
    const auto stop = std::chrono::steady_clock::now();
    const double ms = std::chrono::duration<double, std::milli>(stop - start).count() / opt.runs;

    const torch::Tensor out64 = output.to(torch::kCPU, torch::kFloat64);
    const double sum = out64.sum().item<double>();
    const double abs_sum = out64.abs().sum().item<double>();

    std::printf("model: %s\n", opt.model_path.c_str());
    std::printf("format: %s\n", aoti ? "aoti" : "torchscript");
    std::printf("device: %s\n", device.str().c_str());
    std::printf("tf32: %s\n", at::globalContext().allowTF32CuDNN() ? "on" : "off");
    std::printf("input_shape: %s\n", join(input.sizes()).c_str());
    std::printf("seed: %llu\n", static_cast<unsigned long long>(opt.seed));
    std::printf("output_shape: %s\n", join(output.sizes()).c_str());
    std::printf("output_dtype: %s\n", std::string(c10::toString(output.scalar_type())).c_str());
    std::printf("checksum_sum: %.17g\n", sum);
    std::printf("checksum_abs_sum: %.17g\n", abs_sum);
    std::printf("warmup_runs: %d\n", opt.warmup);
    std::printf("timed_runs: %d\n", opt.runs);
    std::printf("ms_per_run: %.4f\n", ms);
    std::printf("threads: %d\n", opt.threads);
    std::fflush(stdout);
    if (opt.threads > 1 && !check_threads(forward, opt, device, input)) {
      return 1;
    }
    return 0;
  } catch (const c10::Error& e) {
    std::cerr << "error: " << e.what_without_backtrace() << "\n";
  } catch (const std::exception& e) {
    std::cerr << "error: " << e.what() << "\n";
  }
  return 1;
}
