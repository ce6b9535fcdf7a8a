// tessera/nn/checkpoint.hpp - save and load a module's state as a NumPy .npz archive.
#pragma once

#include "../io/npy.hpp"
#include "../nn.hpp"

TESSERA_BEGIN_NAMESPACE
namespace io {

/// Writes the module's state_dict (parameters, then buffers, by dotted name) to `path` as an
/// .npz archive that numpy.load reads, as save_npz writes it: whole or not at all (synced to
/// disk before and after the rename into place), keeping a replaced file's permission bits.
/// Throws io_error naming the path for two entries under one name (before anything is written,
/// so an existing file is left untouched), for a path save_npz refuses (empty, a directory, a
/// missing directory, a device or FIFO) and when the file cannot be written.
template <class T, class B>
void save(const nn::Module<T, B>& model, const std::filesystem::path& path) {
  save_npz(path, model.state_dict());
}

/// Loads an .npz archive written by save (or by NumPy with the same names, shapes and dtype)
/// into the module, bit-exactly. Throws io_error for a missing or corrupt file, a path that is
/// not a regular file, a wrong dtype, and an archive holding one name twice (load_npz checks
/// this, so the state passed on below has unique names), and what Module::load_state_dict
/// throws for missing, unexpected or misshapen entries (the module is left unchanged then).
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
