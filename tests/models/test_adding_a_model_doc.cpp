// docs/adding-a-model.md cannot rot: every code block that starts with
// `// file: PATH` quotes lines of PATH, and each of them (compared without
// blanks: runs of spaces count as one, leading and trailing ones as none)
// must still be a line of that file, or continue it after a comma: the lists
// a reader extends (the ModelArch enum and names, the traits comment, the
// registry) still match the guide with a new entry appended. The guide's
// model (src/models/neox) is itself tested in test_neox and the layout suite.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

namespace {

// s without leading and trailing blanks, each inner run of blanks one space.
std::string trim(const std::string& s) {
  std::string out;
  for (char c : s) {
    const bool blank = c == ' ' || c == '\t' || c == '\r';
    if (!blank)
      out.push_back(c);
    else if (!out.empty() && out.back() != ' ')
      out.push_back(' ');
  }
  if (!out.empty() && out.back() == ' ') out.pop_back();
  return out;
}

std::vector<std::string> read_lines(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

// Whether the trimmed source line `line` is `want`, or `want` with some of
// its closing brackets, semicolon and blanks taken off, then ',' and more
// (an entry appended: "{ gpt2, neox };" -> "{ gpt2, neox, gemma };").
bool quotes(const std::string& line, const std::string& want) {
  if (line == want) return true;
  for (size_t end = want.size();; --end) {
    if (line.rfind(want.substr(0, end) + ",", 0) == 0) return true;
    if (end == 0 || std::string_view(")]}; ").find(want[end - 1]) == std::string_view::npos) return false;
  }
}

std::string source_dir() {
  const char* d = std::getenv("LATTICE_SOURCE_DIR");
  return d ? d : "";
}

}  // namespace

// An appended entry passes; a changed or removed one does not.
TEST(AddingAModelDoc, QuotedListsMayGrow) {
  const std::string enum_line = "enum class ModelArch : uint8_t { gpt2, llama, bert, neox };";
  EXPECT_TRUE(quotes(enum_line, enum_line));
  EXPECT_TRUE(quotes("enum class ModelArch : uint8_t { gpt2, llama, bert, neox, gemma };", enum_line));
  EXPECT_FALSE(quotes("enum class ModelArch : uint8_t { gpt2, llama, bert };", enum_line));
  EXPECT_FALSE(quotes("enum class ModelArch : uint8_t { gpt2, llama, bert, neo };", enum_line));
  const std::string registry = "llama::registry_entry(), neox::registry_entry()};";
  EXPECT_TRUE(quotes("llama::registry_entry(), neox::registry_entry(),", registry));  // the new one wrapped
  EXPECT_FALSE(quotes("llama::registry_entry(), neox::registry_entry(x)};", registry));
  EXPECT_TRUE(quotes("// rotary, grouped_query, causal, gemma_norm", "// rotary, grouped_query, causal"));
  EXPECT_FALSE(quotes("// rotary, causal", "// rotary, grouped_query, causal"));
}

TEST(AddingAModelDoc, QuotedCodeIsInTheTree) {
  const std::string root = source_dir();
  ASSERT_FALSE(root.empty()) << "LATTICE_SOURCE_DIR is not set";
  const auto doc = read_lines(root + "/docs/adding-a-model.md");
  ASSERT_FALSE(doc.empty()) << "docs/adding-a-model.md is missing";
  int blocks = 0, quoted = 0;
  std::set<std::string> files;
  for (size_t i = 0; i < doc.size(); ++i) {
    // Fences may be indented (a block inside a list item).
    if (trim(doc[i]).rfind("```", 0) != 0 || i + 1 >= doc.size() || trim(doc[i + 1]).rfind("// file: ", 0) != 0)
      continue;
    const std::string file = trim(trim(doc[i + 1]).substr(9));
    const auto src = read_lines(root + "/" + file);
    ASSERT_FALSE(src.empty()) << "the guide quotes " << file << ", which is missing or empty";
    std::vector<std::string> have;
    for (const std::string& l : src) have.push_back(trim(l));
    ++blocks;
    files.insert(file);
    for (i += 2; i < doc.size() && trim(doc[i]).rfind("```", 0) != 0; ++i) {
      const std::string want = trim(doc[i]);
      if (want.empty()) continue;
      ++quoted;
      EXPECT_TRUE(std::any_of(have.begin(), have.end(), [&](const std::string& l) { return quotes(l, want); }))
          << "docs/adding-a-model.md line " << i + 1 << " is not a line of " << file << " any more:\n  " << want;
    }
  }
  // The walkthrough quotes the model, its policy, the registry, the config and the tests.
  EXPECT_GE(blocks, 10);
  EXPECT_GE(quoted, 40);
  for (const char* f : {"src/models/neox/neox.cpp", "src/models/neox/neox_params.cpp", "src/models/registry.cpp",
                        "src/config/config.h", "tests/models/test_neox.cpp"})
    EXPECT_TRUE(files.count(f)) << f;
}
