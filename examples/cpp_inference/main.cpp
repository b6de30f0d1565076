// fused_ops_infer: runs a model that uses the fused operators, from C++ only (libtorch +
// libfused_ops.so, no Python), in either of PyTorch's C++ deployment formats:
//
//   fused_ops_infer <model.pt | model.pt2> [N C D H W] [--runs K] [--warmup K] [--seed S]
//                   [--device cpu|cuda] [--no-tf32]
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
// and of its absolute values, in double), warmup_runs, timed_runs, ms_per_run.
#include <torch/csrc/inductor/aoti_package/model_package_loader.h>
#include <torch/cuda.h>
#include <torch/script.h>
#include <torch/torch.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <iostream>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>
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
};

[[noreturn]] void usage(const char* argv0, const std::string& error) {
  if (!error.empty()) {
    std::cerr << "error: " << error << "\n";
  }
  std::cerr << "usage: " << argv0
            << " <model.pt | model.pt2> [N C D H W] [--runs K] [--warmup K] [--seed S]"
               " [--device cpu|cuda]"
               " [--no-tf32]\n";
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
      package = std::make_unique<torch::inductor::AOTIModelPackageLoader>(opt.model_path);
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

    torch::manual_seed(opt.seed);
    const torch::Tensor input = torch::rand(shape, torch::kFloat32).to(device);

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
    return 0;
  } catch (const c10::Error& e) {
    std::cerr << "error: " << e.what_without_backtrace() << "\n";
  } catch (const std::exception& e) {
    std::cerr << "error: " << e.what() << "\n";
  }
  return 1;
}
