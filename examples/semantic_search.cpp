// Semantic search over the Debian packages installed on this machine: encodes each package's
// name and short description with all-MiniLM-L6-v2 (a progress bar), then prints the packages
// closest in meaning to each query given on the command line, with their cosine similarity.
//
//   semantic_search [--model DIR] [--status FILE] [--top K] [--batch B] [--threads T]
//                   [--limit N] [--dtype fp32|int8] "a query" ["another query" ...]
//
// The model folder comes from scripts/fetch_model.sh (default: ~/.cache/tessera/
// all-MiniLM-L6-v2); the corpus from dpkg's status file (default /var/lib/dpkg/status).
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <numeric>
#include <string>
#include <tessera/models/bert.hpp>
#include <tessera/tessera.hpp>
#include <vector>

namespace ts = tessera;

namespace {

struct Args {
  std::string model, status = "/var/lib/dpkg/status", dtype = "fp32";
  int64_t top = 5, batch = 32, limit = 0;
  int threads = 2;
  std::vector<std::string> queries;
};

[[noreturn]] void usage(const std::string& why) {
  std::fprintf(stderr,
               "semantic_search: %s\nusage: semantic_search [--model DIR] [--status FILE] "
               "[--top K] [--batch B] [--threads T] [--limit N] [--dtype fp32|int8] QUERY...\n",
               why.c_str());
  std::exit(2);
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
        a.dtype = v;
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
    }
  }
  if (a.queries.empty()) usage("give at least one query");
  if (a.top < 1 || a.batch < 1 || a.threads < 1 || a.limit < 0)
    usage("--top, --batch and --threads must be positive, --limit not negative");
  if (a.dtype != "fp32" && a.dtype != "int8")
    usage("--dtype " + a.dtype + ": fp32 or int8 (bf16 and fp8 are not implemented yet)");
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

void progress(int64_t done, int64_t total, double seconds, bool tty) {
  constexpr int width = 30;
  const int filled = static_cast<int>(width * done / std::max<int64_t>(total, 1));
  std::printf("%sencoding [%s%s] %lld/%lld %6.1f sentences/s%s", tty ? "\r" : "",
              std::string(filled, '=').c_str(), std::string(width - filled, ' ').c_str(),
              static_cast<long long>(done), static_cast<long long>(total),
              static_cast<double>(done) / std::max(seconds, 1e-9), tty ? "" : "\n");
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  const Args args = parse(argc, argv);
  try {
    ts::set_num_threads(args.threads);
    const auto model = ts::models::bert::load(args.model, args.dtype == "int8"
                                                              ? ts::models::bert::precision::int8
                                                              : ts::models::bert::precision::fp32);
    const std::vector<std::string> docs = package_descriptions(args.status, args.limit);
    const int64_t n = static_cast<int64_t>(docs.size()), h = model.cfg.hidden_size;
    if (n == 0) throw ts::error("semantic_search: no package descriptions in " + args.status);

    // Encode in chunks of a few batches, to redraw the progress bar in between.
    const bool tty = isatty(fileno(stdout));
    ts::Tensor<float> emb({n, h});
    const auto t0 = std::chrono::steady_clock::now();
    const int64_t chunk = args.batch * 4;
    for (int64_t b = 0; b < n; b += chunk) {
      const int64_t e = std::min(n, b + chunk);
      const std::span<const std::string> part(docs.data() + b, static_cast<size_t>(e - b));
      emb.slice(0, b, e).copy_(model.encode(part, args.batch));
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (tty || e == n) progress(e, n, s, tty);
    }
    if (tty) std::printf("\n");

    const ts::Tensor<float> q = model.encode(args.queries);
    const ts::Tensor<float> scores = ts::matmul(q, emb.transpose(0, 1));  // cosines: unit rows
    for (int64_t i = 0; i < static_cast<int64_t>(args.queries.size()); ++i) {
      const std::vector<float> row = scores.select(0, i).contiguous().to_vector();
      std::vector<int64_t> order(row.size());
      std::iota(order.begin(), order.end(), int64_t{0});
      const int64_t k = std::min<int64_t>(args.top, n);
      std::partial_sort(order.begin(), order.begin() + k, order.end(),
                        [&](int64_t a, int64_t b) { return row[a] > row[b]; });
      std::printf("\n%s\n", args.queries[static_cast<size_t>(i)].c_str());
      for (int64_t j = 0; j < k; ++j)
        std::printf("  %.3f  %s\n", row[order[j]], docs[static_cast<size_t>(order[j])].c_str());
    }
  } catch (const ts::error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    if (std::string(e.what()).find("all-MiniLM") != std::string::npos ||
        std::string(e.what()).find("config.json") != std::string::npos)
      std::fprintf(stderr, "(fetch the model with scripts/fetch_model.sh, or pass --model DIR)\n");
    return 1;
  }
  return 0;
}
