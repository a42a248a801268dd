// Shape: up to kMaxDims extents held inline, so copying a Tensor never allocates.
#pragma once
#include <cstdint>
#include <initializer_list>
#include <ostream>
#include <string>
#include <vector>

#include "core/error.h"

namespace ringgrad {

class Shape {
 public:
  static constexpr int kMaxDims = 6;

  Shape() = default;
  Shape(std::initializer_list<int64_t> dims) { assign(dims.begin(), dims.end()); }
  explicit Shape(const std::vector<int64_t>& dims) { assign(dims.begin(), dims.end()); }

  int size() const { return ndim_; }
  int64_t operator[](int i) const { return dims_[i]; }
  int64_t& operator[](int i) { return dims_[i]; }
  const int64_t* begin() const { return dims_; }
  const int64_t* end() const { return dims_ + ndim_; }
  int64_t numel() const {
    int64_t n = 1;
    for (int i = 0; i < ndim_; ++i) n *= dims_[i];
    return n;
  }
  std::vector<int64_t> vec() const { return {begin(), end()}; }
  bool operator==(const Shape& o) const {
    if (ndim_ != o.ndim_) return false;
    for (int i = 0; i < ndim_; ++i)
      if (dims_[i] != o.dims_[i]) return false;
    return true;
  }
  bool operator!=(const Shape& o) const { return !(*this == o); }
  std::string str() const {
    std::string s = "[";
    for (int i = 0; i < ndim_; ++i) s += (i ? ", " : "") + std::to_string(dims_[i]);
    return s + "]";
  }

 private:
  template <class It>
  void assign(It first, It last) {
    for (; first != last; ++first) {
      RG_CHECK_LT(ndim_, kMaxDims, "Shape has too many dimensions");
      RG_CHECK_GE(*first, 0, "Shape extents must be non-negative");
      dims_[ndim_++] = *first;
    }
  }
  int64_t dims_[kMaxDims] = {};
  int ndim_ = 0;
};

inline std::ostream& operator<<(std::ostream& os, const Shape& s) { return os << s.str(); }

}  // namespace ringgrad
