// NumPy's .npy format 1.0 (numpy.lib.format): magic, version, a header
// length, a Python dict literal padded so the data starts on a 64-byte
// boundary, then the raw data. What hilnas writes for Python to read
// (logits for tests/reference) and what its tests feed the token reader.
#ifndef HILNAS_UTIL_NPY_H_
#define HILNAS_UTIL_NPY_H_

#include <string>

namespace hilnas {

// `descr` like "<f4", `shape` a Python tuple like "(48, 300)" or "(4,)";
// `data` holds the elements in C order.
inline std::string NpyBytes(const std::string& descr, const std::string& shape,
                            const std::string& data) {
  std::string header =
      "{'descr': '" + descr + "', 'fortran_order': False, 'shape': " + shape + ", }";
  header.append(63 - (10 + header.size()) % 64, ' ');
  header += '\n';
  std::string out = "\x93NUMPY";
  out += '\x01';
  out += '\x00';
  out += static_cast<char>(header.size() & 0xff);
  out += static_cast<char>(header.size() >> 8);
  return out + header + data;
}

}  // namespace hilnas

#endif  // HILNAS_UTIL_NPY_H_
