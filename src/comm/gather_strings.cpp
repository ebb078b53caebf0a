#include "comm/gather_strings.h"

#include <algorithm>

namespace lattice::comm {

std::vector<std::string> all_gather_strings(Group& g, const std::string& mine) {
  if (g.size() == 1) return {mine};
  Tensor len = Tensor::from<int32_t>({int32_t(mine.size())}, {1});
  Tensor lens = Tensor::zeros({g.size()}, DType::i32);
  g.all_gather(lens, len)->wait();
  int32_t longest = 1;
  for (int r = 0; r < g.size(); ++r) longest = std::max(longest, lens.data<int32_t>()[r]);
  Tensor buf = Tensor::zeros({longest}, DType::i32);
  for (size_t i = 0; i < mine.size(); ++i) buf.data<int32_t>()[i] = static_cast<unsigned char>(mine[i]);
  Tensor all = Tensor::zeros({g.size() * int64_t(longest)}, DType::i32);
  g.all_gather(all, buf)->wait();
  std::vector<std::string> out;
  for (int r = 0; r < g.size(); ++r) {
    const int32_t* p = all.data<int32_t>() + int64_t(r) * longest;
    std::string s(size_t(lens.data<int32_t>()[r]), '\0');
    for (size_t i = 0; i < s.size(); ++i) s[i] = char(p[i]);
    out.push_back(std::move(s));
  }
  return out;
}

}  // namespace lattice::comm
