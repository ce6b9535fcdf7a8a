// Semantic search over the Debian packages installed on this machine: encodes each package's
// name and short description with all-MiniLM-L6-v2 (a progress bar), then prints the packages
// closest in meaning to each query given on the command line, with their cosine similarity.
//
//   semantic_search [--model DIR] [--status FILE] [--top K] [--batch B] [--threads T]
//                   [--limit N] [--dtype fp32|bf16|fp16|int8|int8w7|fp8] [--device cpu|cuda]
//                   [--queries FILE] [--agree-with DTYPE [--min-agreement F]]
//                   [--calibrate FILE] [QUERY ...]
//
// The model folder comes from scripts/fetch_model.sh (default: ~/.cache/tessera/
// all-MiniLM-L6-v2); the corpus from dpkg's status file (default /var/lib/dpkg/status).
// --queries adds one query per line of FILE (examples/data/search_queries.txt holds 200).
// --agree-with DTYPE runs the search in both precisions and reports how often their top
// results agree (with --min-agreement F, the exit status is 1 below that fraction), instead of
// printing the matches. int8w7 is int8 with 7-bit weights: faster on CPUs with AVX2 but not VNNI
// (the program says so when --dtype int8 runs on one). --calibrate FILE rounds the fp8 or int8
// weights by GPTQ against the layers' inputs on the lines of FILE (a hundred texts like those
// searched; models.md), instead of to nearest. --device cuda needs the build of this file by nvcc
// (semantic_search_cuda, built when CMake runs with -DTESSERA_ENABLE_CUDA=ON).
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <optional>
#include <span>
#include <string>
#include <tessera/models/bert.hpp>
#include <tessera/tessera.hpp>
#include <vector>

#if defined(__CUDACC__) || defined(TESSERA_CUDA_HOST_EMULATION)
#include <tessera/cuda.hpp>
#define SEMANTIC_SEARCH_CUDA 1
#endif

namespace ts = tessera;
namespace bert = ts::models::bert;

namespace {

struct Args {
  std::string model, status = "/var/lib/dpkg/status", device = "cpu";
  bert::precision dtype = bert::precision::fp32;
  std::optional<bert::precision> agree_with;
  double min_agreement = 0;
  int64_t top = 5, batch = 32, limit = 0;
  int threads = 2;
  std::vector<std::string> queries, calibration;
};

[[noreturn]] void usage(const std::string& why) {
  std::fprintf(stderr,
               "semantic_search: %s\nusage: semantic_search [--model DIR] [--status FILE] "
               "[--top K] [--batch B] [--threads T] [--limit N] "
               "[--dtype fp32|bf16|fp16|int8|int8w7|fp8] [--device cpu|cuda] [--queries FILE] "
               "[--agree-with DTYPE [--min-agreement F]] [--calibrate FILE] [QUERY ...]\n",
               why.c_str());
  std::exit(2);
}

/// The non-empty lines of a file of queries or calibration texts.
std::vector<std::string> read_lines(const std::string& path, const std::string& what) {
  std::ifstream in(path);
  if (!in) usage("cannot read the " + what + " in '" + path + "'");
  std::vector<std::string> out;
  for (std::string line; std::getline(in, line);)
    if (!line.empty()) out.push_back(line);
  return out;
}

Args parse(int argc, char** argv) {
  Args a;
  const char* home = std::getenv("HOME");
  const char* cache = std::getenv("XDG_CACHE_HOME");
  a.model = (cache && *cache ? std::string(cache) : std::string(home ? home : ".") + "/.cache") +
            "/tessera/all-MiniLM-L6-v2";
  for (int i = 1; i < argc; ++i) {
    const std::string k = argv[i];
    if (k.rfind("--", 0) != 0) {
      a.queries.push_back(k);
      continue;
    }
    if (i + 1 >= argc) usage(k + " needs a value");
    const std::string v = argv[++i];
    try {
      if (k == "--model")
        a.model = v;
      else if (k == "--status")
        a.status = v;
      else if (k == "--dtype")
        a.dtype = bert::parse_precision(v);
      else if (k == "--agree-with")
        a.agree_with = bert::parse_precision(v);
      else if (k == "--device")
        a.device = v;
      else if (k == "--calibrate")
        a.calibration = read_lines(v, "calibration texts");
      else if (k == "--queries") {
        const auto q = read_lines(v, "queries");
        a.queries.insert(a.queries.end(), q.begin(), q.end());
      } else if (k == "--min-agreement")
        a.min_agreement = std::stod(v);
      else if (k == "--top")
        a.top = std::stoll(v);
      else if (k == "--batch")
        a.batch = std::stoll(v);
      else if (k == "--limit")
        a.limit = std::stoll(v);
      else if (k == "--threads")
        a.threads = std::stoi(v);
      else
        usage("unknown option " + k);
    } catch (const std::logic_error&) {
      usage(k + " needs a number, not '" + v + "'");
    } catch (const ts::error& e) {
      usage(k + ": " + e.what());
    }
  }
  if (a.queries.empty()) usage("give at least one query");
  if (a.top < 1 || a.batch < 1 || a.threads < 1 || a.limit < 0)
    usage("--top, --batch and --threads must be positive, --limit not negative");
  if (a.device != "cpu" && a.device != "cuda") usage("--device is cpu or cuda, not " + a.device);
  if (!a.calibration.empty() && !bert::takes_calibration(a.dtype) &&
      !(a.agree_with && bert::takes_calibration(*a.agree_with)))
    usage("--calibrate is for --dtype fp8, int8 or int8w7");
  return a;
}

/// "name: short description" of every package in dpkg's status file.
std::vector<std::string> package_descriptions(const std::string& path, int64_t limit) {
  std::ifstream in(path);
  if (!in) throw ts::io_error("semantic_search: cannot read '" + path + "'");
  std::vector<std::string> out;
  std::string line, name;
  while (std::getline(in, line) && (limit == 0 || static_cast<int64_t>(out.size()) < limit)) {
    if (line.rfind("Package: ", 0) == 0) name = line.substr(9);
    if (line.rfind("Description: ", 0) == 0) out.push_back(name + ": " + line.substr(13));
  }
  return out;
}

void progress(const char* what, int64_t done, int64_t total, double seconds, bool tty) {
  constexpr int width = 30;
  const int filled = static_cast<int>(width * done / std::max<int64_t>(total, 1));
  std::printf("%sencoding%s [%s%s] %lld/%lld %6.1f sentences/s%s", tty ? "\r" : "", what,
              std::string(filled, '=').c_str(), std::string(width - filled, ' ').c_str(),
              static_cast<long long>(done), static_cast<long long>(total),
              static_cast<double>(done) / std::max(seconds, 1e-9), tty ? "" : "\n");
  std::fflush(stdout);
}

/// The search in one precision: the corpus encoded (with a progress bar), then the cosine of
/// every query to every document, on the host as [queries, documents].
template <class B>
ts::Tensor<float> search_scores(const Args& args, bert::precision p,
                                const std::vector<std::string>& docs) {
  const std::span<const std::string> calibration =
      bert::takes_calibration(p) ? std::span<const std::string>(args.calibration)
                                 : std::span<const std::string>();
  const auto model = bert::load<B>(args.model, p, {}, calibration);
  const int64_t n = static_cast<int64_t>(docs.size()), h = model.cfg.hidden_size;
  const std::string what = args.agree_with ? std::string(" (") + bert::precision_name(p) + ")" : "";
  // Encode in chunks of a few batches, to redraw the progress bar in between.
  const bool tty = isatty(fileno(stdout));
  ts::Tensor<float, B> emb({n, h});
  const auto t0 = std::chrono::steady_clock::now();
  const int64_t chunk = args.batch * 4;
  for (int64_t b = 0; b < n; b += chunk) {
    const int64_t e = std::min(n, b + chunk);
    const std::span<const std::string> part(docs.data() + b, static_cast<size_t>(e - b));
    emb.slice(0, b, e).copy_(model.encode(part, args.batch));
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (tty || e == n) progress(what.c_str(), e, n, s, tty);
  }
  if (tty) std::printf("\n");
  const ts::Tensor<float, B> q = model.encode(args.queries, args.batch);
  return ts::matmul(q, emb.transpose(0, 1)).template to<ts::cpu>();  // cosines: unit rows
}

/// The indices of the k largest scores of row i, best first.
std::vector<int64_t> best(const ts::Tensor<float>& scores, int64_t i, int64_t k) {
  const std::vector<float> row = scores.select(0, i).contiguous().to_vector();
  std::vector<int64_t> order(row.size());
  for (size_t j = 0; j < order.size(); ++j) order[j] = static_cast<int64_t>(j);
  k = std::min<int64_t>(k, static_cast<int64_t>(row.size()));
  std::partial_sort(order.begin(), order.begin() + k, order.end(),
                    [&](int64_t a, int64_t b) { return row[a] > row[b]; });
  order.resize(static_cast<size_t>(k));
  return order;
}

template <class B>
int run(const Args& args) {
  const std::vector<std::string> docs = package_descriptions(args.status, args.limit);
  if (docs.empty()) throw ts::error("semantic_search: no package descriptions in " + args.status);
  if constexpr (std::is_same_v<B, ts::cpu>)
    if (args.dtype == bert::precision::int8 && ts::int8_fast_weight_max<ts::cpu>() < 127)
      std::printf("note: this CPU multiplies 7-bit weights faster: try --dtype int8w7\n");
  const ts::Tensor<float> scores = search_scores<B>(args, args.dtype, docs);
  const int64_t queries = static_cast<int64_t>(args.queries.size());
  if (!args.agree_with) {
    for (int64_t i = 0; i < queries; ++i) {
      std::printf("\n%s\n", args.queries[static_cast<size_t>(i)].c_str());
      for (const int64_t j : best(scores, i, args.top))
        std::printf("  %.3f  %s\n", scores.select(0, i).select(0, j).item(),
                    docs[static_cast<size_t>(j)].c_str());
    }
    return 0;
  }
  // Agreement: the same search in the other precision, top results compared query by query.
  const ts::Tensor<float> ref = search_scores<B>(args, *args.agree_with, docs);
  int64_t agree = 0;
  for (int64_t i = 0; i < queries; ++i) {
    // The reference's best two: the first to compare, the second for the margin.
    const std::vector<int64_t> r2 = best(ref, i, 2);
    const int64_t a = best(scores, i, 1)[0], r = r2[0];
    if (a == r) {
      ++agree;
      continue;
    }
    // How far the reference's best is ahead of its second: small margins flip first.
    const float margin = r2.size() < 2 ? 0.0f
                                       : ref.select(0, i).select(0, r2[0]).item() -
                                             ref.select(0, i).select(0, r2[1]).item();
    std::printf("differs: %s (%s margin %.4f)\n  %s: %s\n  %s: %s\n",
                args.queries[static_cast<size_t>(i)].c_str(),
                bert::precision_name(*args.agree_with), margin, bert::precision_name(args.dtype),
                docs[static_cast<size_t>(a)].c_str(), bert::precision_name(*args.agree_with),
                docs[static_cast<size_t>(r)].c_str());
  }
  const double share = static_cast<double>(agree) / static_cast<double>(queries);
  std::printf("top-1 agreement of %s with %s: %lld of %lld queries (%.1f%%) over %zu packages\n",
              bert::precision_name(args.dtype), bert::precision_name(*args.agree_with),
              static_cast<long long>(agree), static_cast<long long>(queries), 100 * share,
              docs.size());
  return share >= args.min_agreement ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  const Args args = parse(argc, argv);
#if !defined(SEMANTIC_SEARCH_CUDA)
  if (args.device == "cuda") {
    std::fprintf(stderr,
                 "semantic_search: this build has no CUDA backend; --device cuda needs "
                 "semantic_search_cuda (built by nvcc when CMake runs with "
                 "-DTESSERA_ENABLE_CUDA=ON)\n");
    return 2;
  }
#endif
  try {
    ts::set_num_threads(args.threads);
#if defined(SEMANTIC_SEARCH_CUDA)
    if (args.device == "cuda") return run<ts::cuda>(args);
#endif
    return run<ts::cpu>(args);
  } catch (const ts::error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    if (std::string(e.what()).find("all-MiniLM") != std::string::npos ||
        std::string(e.what()).find("config.json") != std::string::npos)
      std::fprintf(stderr, "(fetch the model with scripts/fetch_model.sh, or pass --model DIR)\n");
    return 1;
  }
}
