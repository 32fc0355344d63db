// .npy and safetensors files for the client (Client::load_npy,
// Tensor::save_npy, Client::load_safetensors / save_safetensors).
//
// Debian 12 packages no maintained C++ library for either format (cnpy and
// safetensors-cpp are not in the archive), and both are small and fully
// specified, so they are written here:
//   .npy (format 1.0 written; 1.x-3.x read): "\x93NUMPY", major, minor,
//        a little-endian header length (u16 for 1.x, u32 after), then a
//        Python dict literal {'descr': '<f4', 'fortran_order': False,
//        'shape': (2, 3), } padded with spaces and '\n' so the data starts at
//        a multiple of 64 bytes; then the C-order data.
//   safetensors: a u64 little-endian header length N, N bytes of JSON
//        {"name": {"dtype": "F32", "shape": [2, 3], "data_offsets": [b, e]},
//         "__metadata__": {...}} (offsets relative to the data section),
//        then the data.
#include <algorithm>
#include <cctype>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <iterator>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "tensord/client.h"

namespace tensord::client {
namespace {

[[noreturn]] void Invalid(const std::string& what) {
  throw Error(StatusCode::INVALID_ARGUMENT, what);
}

std::string ReadFile(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    throw Error(StatusCode::NOT_FOUND, "cannot open " + path.string());
  }
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void WriteFile(const std::filesystem::path& path, const std::string& head,
               const std::string& data) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(head.data(), static_cast<std::streamsize>(head.size()));
  out.write(data.data(), static_cast<std::streamsize>(data.size()));
  if (!out) throw Error(StatusCode::UNKNOWN, "cannot write " + path.string());
}

struct DTypeCodes {
  DType dtype;
  const char* npy;          // numpy descr
  const char* safetensors;  // safetensors dtype
};
constexpr DTypeCodes kCodes[] = {
    {DType::kFloat32, "<f4", "F32"}, {DType::kFloat64, "<f8", "F64"},
    {DType::kFloat16, "<f2", "F16"}, {DType::kBFloat16, nullptr, "BF16"},
    {DType::kInt32, "<i4", "I32"},   {DType::kInt64, "<i8", "I64"},
    {DType::kBool, "|b1", "BOOL"},
};

uint64_t NumBytes(DType dtype, const std::vector<int64_t>& shape) {
  uint64_t n = DTypeSize(dtype);
  for (int64_t d : shape) n *= static_cast<uint64_t>(d);
  return n;
}

// --- a JSON reader for safetensors headers ---------------------------------

struct Json {
  enum Kind { kNull, kBool, kNumber, kString, kArray, kObject } kind = kNull;
  double number = 0;
  std::string text;
  std::vector<Json> items;
  std::vector<std::pair<std::string, Json>> members;
};

class JsonParser {
 public:
  explicit JsonParser(std::string_view s) : s_(s) {}
  Json Parse() {
    Json v = Value();
    Space();
    if (pos_ != s_.size()) Fail("trailing characters");
    return v;
  }

 private:
  [[noreturn]] void Fail(const std::string& why) {
    Invalid("safetensors header is not valid JSON: " + why + " at byte " +
            std::to_string(pos_));
  }
  void Space() {
    while (pos_ < s_.size() &&
           std::isspace(static_cast<unsigned char>(s_[pos_])))
      ++pos_;
  }
  char Peek() {
    Space();
    if (pos_ >= s_.size()) Fail("unexpected end");
    return s_[pos_];
  }
  void Expect(char c) {
    if (Peek() != c) Fail(std::string("expected '") + c + "'");
    ++pos_;
  }
  std::string String() {
    Expect('"');
    std::string out;
    while (pos_ < s_.size() && s_[pos_] != '"') {
      char c = s_[pos_++];
      if (c == '\\') {
        if (pos_ >= s_.size()) Fail("bad escape");
        c = s_[pos_++];
        if (c == 'u') {  // kept verbatim: names are compared, not shown
          out += "\\u";
          continue;
        }
        c = c == 'n' ? '\n' : c == 't' ? '\t' : c;
      }
      out += c;
    }
    if (pos_ >= s_.size()) Fail("unterminated string");
    ++pos_;
    return out;
  }
  Json Value() {
    Json v;
    const char c = Peek();
    if (c == '{') {
      v.kind = Json::kObject;
      ++pos_;
      if (Peek() == '}') {
        ++pos_;
        return v;
      }
      while (true) {
        std::string key = String();
        Expect(':');
        v.members.emplace_back(std::move(key), Value());
        if (Peek() == ',') {
          ++pos_;
          continue;
        }
        Expect('}');
        return v;
      }
    }
    if (c == '[') {
      v.kind = Json::kArray;
      ++pos_;
      if (Peek() == ']') {
        ++pos_;
        return v;
      }
      while (true) {
        v.items.push_back(Value());
        if (Peek() == ',') {
          ++pos_;
          continue;
        }
        Expect(']');
        return v;
      }
    }
    if (c == '"') {
      v.kind = Json::kString;
      v.text = String();
      return v;
    }
    for (std::string_view word : {"true", "false", "null"}) {
      if (s_.substr(pos_, word.size()) == word) {
        pos_ += word.size();
        v.kind = word == "null" ? Json::kNull : Json::kBool;
        return v;
      }
    }
    const size_t start = pos_;
    while (pos_ < s_.size() &&
           (std::isdigit(static_cast<unsigned char>(s_[pos_])) ||
            std::strchr("+-.eE", s_[pos_]) != nullptr)) {
      ++pos_;
    }
    if (start == pos_) Fail("unexpected character");
    v.kind = Json::kNumber;
    v.number = std::stod(std::string(s_.substr(start, pos_ - start)));
    return v;
  }

  std::string_view s_;
  size_t pos_ = 0;
};

const Json* Member(const Json& object, std::string_view key) {
  for (const auto& [k, v] : object.members) {
    if (k == key) return &v;
  }
  return nullptr;
}

std::vector<int64_t> Ints(const Json* v, const std::string& what) {
  if (v == nullptr || v->kind != Json::kArray) Invalid(what + " is missing");
  std::vector<int64_t> out;
  for (const Json& item : v->items) {
    if (item.kind != Json::kNumber || item.number < 0) {
      Invalid(what + " holds a value that is not a non-negative integer");
    }
    out.push_back(static_cast<int64_t>(item.number));
  }
  return out;
}

}  // namespace

void Tensor::save_npy(const std::filesystem::path& path) const {
  const char* descr = nullptr;
  for (const DTypeCodes& c : kCodes) {
    if (c.dtype == dtype()) descr = c.npy;
  }
  if (descr == nullptr) {
    Invalid("save_npy: NumPy has no dtype for " +
            std::string(DTypeName(dtype())));
  }
  std::string shape_text = "(";
  for (size_t i = 0; i < shape().size(); ++i) {
    shape_text += std::to_string(shape()[i]);
    shape_text +=
        shape().size() == 1 ? "," : (i + 1 < shape().size() ? ", " : "");
  }
  shape_text += ")";
  std::string dict = std::string("{'descr': '") + descr +
                     "', 'fortran_order': False, 'shape': " + shape_text +
                     ", }";
  // Magic (6) + version (2) + length (2) + dict + padding + '\n' is a
  // multiple of 64.
  const size_t unpadded = 10 + dict.size() + 1;
  dict.append((64 - unpadded % 64) % 64, ' ');
  dict += '\n';
  std::string head("\x93NUMPY\x01\x00", 8);
  head += static_cast<char>(dict.size() & 0xff);
  head += static_cast<char>(dict.size() >> 8);
  head += dict;
  WriteFile(path, head, fetch_bytes());
}

Tensor Client::load_npy(const std::filesystem::path& path,
                        const Device& device) const {
  const std::string file = ReadFile(path);
  const std::string where = "load_npy(" + path.string() + "): ";
  if (file.size() < 10 || file.compare(0, 6, "\x93NUMPY") != 0) {
    Invalid(where + "not a .npy file (bad magic)");
  }
  const int major = static_cast<unsigned char>(file[6]);
  size_t header_len = 0, offset = 0;
  if (major == 1) {
    header_len =
        static_cast<unsigned char>(file[8]) |
        (static_cast<size_t>(static_cast<unsigned char>(file[9])) << 8);
    offset = 10;
  } else if (major == 2 || major == 3) {
    if (file.size() < 12) Invalid(where + "truncated header");
    for (int i = 0; i < 4; ++i) {
      header_len |= static_cast<size_t>(static_cast<unsigned char>(file[8 + i]))
                    << (8 * i);
    }
    offset = 12;
  } else {
    Invalid(where + "unsupported format version " + std::to_string(major));
  }
  if (file.size() < offset + header_len) Invalid(where + "truncated header");
  const std::string header = file.substr(offset, header_len);
  auto field = [&](const std::string& key) -> std::string {
    const size_t k = header.find("'" + key + "'");
    if (k == std::string::npos) Invalid(where + "header lacks '" + key + "'");
    size_t v = header.find(':', k);
    if (v == std::string::npos) Invalid(where + "malformed header");
    ++v;
    while (v < header.size() && header[v] == ' ') ++v;
    return header.substr(v);
  };
  std::string descr = field("descr");
  if (descr.empty() || (descr[0] != '\'' && descr[0] != '"')) {
    Invalid(where + "malformed descr");
  }
  descr = descr.substr(1, descr.find(descr[0], 1) - 1);
  if (field("fortran_order").rfind("False", 0) != 0) {
    Invalid(where + "Fortran-order arrays are not supported");
  }
  const std::string shape_text = field("shape");
  if (shape_text.empty() || shape_text[0] != '(') {
    Invalid(where + "malformed shape");
  }
  std::vector<int64_t> shape;
  std::istringstream dims(shape_text.substr(1, shape_text.find(')') - 1));
  std::string item;
  while (std::getline(dims, item, ',')) {
    if (item.find_first_not_of(' ') == std::string::npos) continue;
    shape.push_back(std::stoll(item));
  }
  std::optional<DType> dtype;
  for (const DTypeCodes& c : kCodes) {
    if (c.npy != nullptr && descr == c.npy) dtype = c.dtype;
  }
  if (descr == "|u1" || descr == "|i1") dtype.reset();
  if (!dtype.has_value()) {
    Invalid(where + "unsupported dtype '" + descr +
            "' (expected <f4, <f8, <f2, <i4, <i8 or |b1)");
  }
  const size_t data_offset = offset + header_len;
  const uint64_t nbytes = NumBytes(*dtype, shape);
  if (file.size() - data_offset != nbytes) {
    Invalid(where + "the data is " + std::to_string(file.size() - data_offset) +
            " bytes but the header's shape needs " + std::to_string(nbytes));
  }
  return FromBytes(*dtype, shape, std::string_view(file).substr(data_offset),
                   device);
}

void Client::save_safetensors(const std::filesystem::path& path,
                              const std::map<std::string, Tensor>& tensors) {
  std::string header = "{";
  std::string data;
  for (const auto& [name, t] : tensors) {
    const char* code = nullptr;
    for (const DTypeCodes& c : kCodes) {
      if (c.dtype == t.dtype()) code = c.safetensors;
    }
    std::string shape;
    for (size_t i = 0; i < t.shape().size(); ++i) {
      if (i) shape += ',';
      shape += std::to_string(t.shape()[i]);
    }
    const size_t begin = data.size();
    data += t.fetch_bytes();
    if (header.size() > 1) header += ",";
    std::string escaped;
    for (char c : name) {
      if (c == '"' || c == '\\') escaped += '\\';
      escaped += c;
    }
    header += "\"" + escaped + "\":{\"dtype\":\"" + code + "\",\"shape\":[" +
              shape + "],\"data_offsets\":[" + std::to_string(begin) + "," +
              std::to_string(data.size()) + "]}";
  }
  header += "}";
  header.append((8 - header.size() % 8) % 8, ' ');
  std::string head(8, '\0');
  for (int i = 0; i < 8; ++i) {
    head[i] = static_cast<char>(
        (static_cast<uint64_t>(header.size()) >> (8 * i)) & 0xff);
  }
  WriteFile(path, head + header, data);
}

std::map<std::string, Tensor> Client::load_safetensors(
    const std::filesystem::path& path, const Device& device) const {
  const std::string file = ReadFile(path);
  const std::string where = "load_safetensors(" + path.string() + "): ";
  if (file.size() < 8) Invalid(where + "file too short");
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) {
    n |= static_cast<uint64_t>(static_cast<unsigned char>(file[i])) << (8 * i);
  }
  if (n > file.size() - 8) Invalid(where + "header length past the end");
  const Json header = JsonParser(std::string_view(file).substr(8, n)).Parse();
  if (header.kind != Json::kObject) Invalid(where + "header is not an object");
  const std::string_view data = std::string_view(file).substr(8 + n);
  std::map<std::string, Tensor> out;
  for (const auto& [name, entry] : header.members) {
    if (name == "__metadata__") continue;
    const Json* code = Member(entry, "dtype");
    if (code == nullptr || code->kind != Json::kString) {
      Invalid(where + name + ": dtype is missing");
    }
    std::optional<DType> dtype;
    for (const DTypeCodes& c : kCodes) {
      if (code->text == c.safetensors) dtype = c.dtype;
    }
    if (!dtype.has_value()) {
      Invalid(where + name + ": unsupported dtype " + code->text);
    }
    const std::vector<int64_t> shape =
        Ints(Member(entry, "shape"), name + ".shape");
    const std::vector<int64_t> offsets =
        Ints(Member(entry, "data_offsets"), name + ".data_offsets");
    if (offsets.size() != 2 || offsets[0] > offsets[1] ||
        static_cast<uint64_t>(offsets[1]) > data.size() ||
        static_cast<uint64_t>(offsets[1] - offsets[0]) !=
            NumBytes(*dtype, shape)) {
      Invalid(where + name + ": data_offsets do not match the shape and dtype");
    }
    out.emplace(
        name,
        FromBytes(*dtype, shape,
                  data.substr(offsets[0], offsets[1] - offsets[0]), device));
  }
  return out;
}

}  // namespace tensord::client
