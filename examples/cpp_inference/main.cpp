// fused_ops_infer: runs a TorchScript model that uses the fused operators, from C++ only
// (libtorch + libfused_ops.so, no Python).
//
//   fused_ops_infer <model.pt> [N C D H W] [--runs K] [--warmup K] [--seed S]
//                   [--device cpu|cuda] [--no-tf32]
//
// The model is a file saved by examples/export_torchscript.py (torch.jit.script + save).
// The input shape comes from the command line or, if not given there, from the "input_shape"
// extra file that export_torchscript.py stores in the model. The input is
//   torch::manual_seed(seed); torch::rand({N, C, D, H, W})   (float32, on the CPU)
// moved to the device, so Python reproduces it with
//   torch.manual_seed(seed); torch.rand(N, C, D, H, W)
// The device is CUDA when torch::cuda::is_available(), else the CPU (or --device).
// --no-tf32 turns TF32 off for cuDNN convolutions and cuBLAS (libtorch, like PyTorch, allows
// TF32 in cuDNN convolutions by default), e.g. to compare checksums with float32 exactly.
//
// Prints one "key: value" line each: model, device, tf32, input_shape, seed, output_shape,
// output_dtype, checksum_sum, checksum_abs_sum (sums of the output and of its absolute
// values, in double), warmup_runs, timed_runs, ms_per_run.
#include <torch/cuda.h>
#include <torch/script.h>
#include <torch/torch.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <iostream>
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
            << " <model.pt> [N C D H W] [--runs K] [--warmup K] [--seed S] [--device cpu|cuda]"
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

    torch::jit::ExtraFilesMap extra_files{{"input_shape", ""}};
    torch::jit::Module module = torch::jit::load(opt.model_path, device, extra_files);
    module.eval();

    std::vector<int64_t> shape = opt.input_shape;
    if (shape.empty()) {
      if (extra_files["input_shape"].empty()) {
        throw std::runtime_error(
            "no input shape: give N C D H W on the command line (the model has no input_shape "
            "extra file)");
      }
      shape = parse_shape(extra_files["input_shape"]);
    }

    torch::manual_seed(opt.seed);
    const torch::Tensor input = torch::rand(shape, torch::kFloat32).to(device);

    c10::InferenceMode inference_mode;
    std::vector<torch::jit::IValue> inputs{input};
    torch::Tensor output;
    for (int i = 0; i < opt.warmup; ++i) {
      output = module.forward(inputs).toTensor();
    }
    synchronize(device);
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < opt.runs; ++i) {
      output = module.forward(inputs).toTensor();
    }
    synchronize(device);
    const auto stop = std::chrono::steady_clock::now();
    const double ms = std::chrono::duration<double, std::milli>(stop - start).count() / opt.runs;

    const torch::Tensor out64 = output.to(torch::kCPU, torch::kFloat64);
    const double sum = out64.sum().item<double>();
    const double abs_sum = out64.abs().sum().item<double>();

    std::printf("model: %s\n", opt.model_path.c_str());
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
