// tessera/dist/bert.hpp - tensor-parallel BERT inference across the ranks of a ProcessGroup
// (Megatron-style): each rank loads only its share of the attention heads and feed-forward
// features from the weight file, and each encoder layer sums two partial results with an
// all_reduce. Every rank calls encode / forward with the same inputs and gets the whole result.
//
//   auto pg = ts::dist::init();
//   auto m = ts::dist::load_bert_tensor_parallel("all-MiniLM-L6-v2", pg);
//   auto e = m.encode({"a sentence"});   // on every rank
//
// Needs what models/bert.hpp needs (nlohmann/json, utf8proc) and MPI (tessera::dist).
#pragma once

#include <filesystem>

#include "../models/bert.hpp"
#include "process_group.hpp"

TESSERA_BEGIN_NAMESPACE
namespace dist {

/// models::bert::load for rank pg.rank() of pg.size() (see models::bert::partition). Collective
/// in use: every rank must run the same forward calls. Throws shape_error when the heads or the
/// inner features do not divide by the number of ranks.
inline models::bert::Model<cpu> load_bert_tensor_parallel(
    const std::filesystem::path& dir, const ProcessGroup& pg,
    models::bert::precision p = models::bert::precision::fp32) {
  models::bert::partition<cpu> part{pg.rank(), pg.size(),
                                    [pg](const Tensor<float, cpu>& t) { pg.all_reduce(t); }};
  return models::bert::Model<cpu>::load(dir, p, std::move(part));
}

}  // namespace dist
TESSERA_END_NAMESPACE
