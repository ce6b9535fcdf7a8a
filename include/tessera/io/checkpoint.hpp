// tessera/io/checkpoint.hpp - save and load a module's state as a NumPy .npz archive.
#pragma once

#include "../nn.hpp"
#include "npy.hpp"

TESSERA_BEGIN_NAMESPACE
namespace io {

/// Writes the module's state_dict (parameters, then buffers, by dotted name) to `path` as an
/// .npz archive that numpy.load reads. Throws io_error when the file cannot be written.
template <class T, class B>
void save(const nn::Module<T, B>& model, const std::filesystem::path& path) {
  save_npz(path, model.state_dict());
}

/// Loads an .npz archive written by save (or by NumPy with the same names, shapes and dtype)
/// into the module, bit-exactly. Throws io_error for a missing or corrupt file or a wrong dtype,
/// and what Module::load_state_dict throws for missing, unexpected or misshapen entries (the
/// module is left unchanged then).
template <class T, class B>
void load(nn::Module<T, B>& model, const std::filesystem::path& path) {
  auto arrays = load_npz<T>(path);
  nn::state_dict_t<T, B> state;
  for (auto& [name, t] : arrays) {
    if constexpr (std::is_same_v<B, cpu>)
      state.emplace_back(name, t);
    else
      state.emplace_back(name, t.template to<B>());
  }
  // (`model`, not `module`: a line starting with `module` reads as a C++20 module directive
  // to nvcc.)
  model.load_state_dict(state);
}

}  // namespace io
TESSERA_END_NAMESPACE
