// The subcommands' shared argument reader (apps/lattice/args.h): values
// given as `--x V` or `--x=V`, numbers in range, flags without values, and one
// error line for each kind of mistake.
#include <gtest/gtest.h>

#include <string>

#include "args.h"

namespace lattice::cli {
namespace {

// The error line a parse throws ("" when it throws none).
template <typename F>
std::string error_of(F&& parse) {
  try {
    parse();
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

struct Parsed {
  ConfigArgs config;
  int world = 0;
  bool dry = false;
  std::string name;
};

Parsed parse(const Args& args) {
  Parsed p;
  ArgReader r("cmd", "lattice cmd CONFIG [--world N] [--dry] [--name S]", args);
  p.config = read_config_args(r, [&](ArgReader& o) {
    if (o.is("--world")) {
      p.world = o.number(1, 64, "a rank count in [1, 64]");
    } else if (o.flag("--dry")) {
      p.dry = true;
    } else if (o.is("--name")) {
      p.name = o.value();
    } else {
      return false;
    }
    return true;
  });
  return p;
}

TEST(ArgReader, ConfigOverridesAndOptionsInAnyOrder) {
  const Parsed p = parse({"a=1", "--world", "4", "cfg.yaml", "--dry", "b=2", "--name=x=y", "c=3"});
  // the first argument that is no option is CONFIG, even one that looks like an override
  EXPECT_EQ(p.config.path, "a=1");
  EXPECT_EQ(p.config.overrides, (std::vector<std::string>{"cfg.yaml", "b=2", "c=3"}));
  EXPECT_EQ(p.world, 4);
  EXPECT_TRUE(p.dry);
  EXPECT_EQ(p.name, "x=y");  // only the first '=' ends the option's name
  EXPECT_EQ(parse({"cfg.yaml", "--world=8"}).world, 8);
  EXPECT_EQ(parse({"cfg.yaml", "--name=--x"}).name, "--x");   // a value that starts with -- goes after '='
  EXPECT_EQ(parse({"cfg.yaml", "--name", "-x"}).name, "-x");  // one dash is a value (negative numbers)
}

TEST(ArgReader, EachMistakeIsOneLineNamingTheOptionAndValue) {
  EXPECT_EQ(error_of([] { parse({}); }),
            "cmd: no config file given (usage: lattice cmd CONFIG [--world N] [--dry] [--name S])");
  EXPECT_EQ(error_of([] {
              parse({"c.yaml", "--world"});
            }),
            "cmd: --world needs a value (usage: lattice cmd CONFIG [--world N] [--dry] [--name S])");
  EXPECT_EQ(error_of([] {
              parse({"c.yaml", "--name", "--dry"});
            }),
            "cmd: --name needs a value, got the option '--dry' (a value that starts with -- goes after '=': "
            "--name=VALUE) (usage: lattice cmd CONFIG [--world N] [--dry] [--name S])");
  EXPECT_EQ(error_of([] {
              parse({"c.yaml", "--world", "65"});
            }),
            "cmd: --world expects a rank count in [1, 64], got '65'");
  for (const char* bad : {"0", "-1", "4x", "", " 4", "4.0", "nan"})
    EXPECT_EQ(error_of([&] {
                parse({"c.yaml", std::string("--world=") + bad});
              }),
              std::string("cmd: --world expects a rank count in [1, 64], got '") + bad + "'")
        << bad;
  EXPECT_EQ(error_of([] {
              parse({"c.yaml", "--dry=1"});
            }),
            "cmd: --dry takes no value, got '--dry=1' (usage: lattice cmd CONFIG [--world N] [--dry] [--name S])");
  EXPECT_EQ(error_of([] {
              parse({"c.yaml", "--fast"});
            }),
            "cmd: unknown option '--fast' (usage: lattice cmd CONFIG [--world N] [--dry] [--name S])");
  // a prefix of an option is not the option
  EXPECT_EQ(error_of([] {
              parse({"c.yaml", "--worlds=2"});
            }),
            "cmd: unknown option '--worlds=2' (usage: lattice cmd CONFIG [--world N] [--dry] [--name S])");
}

// A path option given empty (`--checkpoint=`, or `--checkpoint "$CKPT"` with
// CKPT unset) is an error: eval took it for no --checkpoint and scored the
// newest checkpoint of checkpoint.dir instead.
TEST(ArgReader, AnEmptyPathIsOneLine) {
  auto path = [](const Args& args) {
    ArgReader r("cmd", "u", args);
    r.next();
    EXPECT_TRUE(r.is("--checkpoint"));
    return r.path();
  };
  EXPECT_EQ(path({"--checkpoint=runs/a"}), "runs/a");
  EXPECT_EQ(error_of([&] { path({"--checkpoint="}); }), "cmd: --checkpoint expects a path, got ''");
  EXPECT_EQ(error_of([&] { path({"--checkpoint", ""}); }), "cmd: --checkpoint expects a path, got ''");
}

TEST(ArgReader, NumbersKeepTheirTypeRange) {
  auto number = [](const std::string& v, auto lo, auto hi) {
    Args args{"--n", v};
    ArgReader r("cmd", "u", args);
    r.next();
    EXPECT_TRUE(r.is("--n"));
    return r.number(lo, hi, "a number");
  };
  EXPECT_EQ(number("18446744073709551615", uint64_t(0), UINT64_MAX), UINT64_MAX);
  EXPECT_DOUBLE_EQ(number("1e-3", 0.0, 1.0), 1e-3);
  EXPECT_NE(error_of([&] { number("inf", 0.0, 1e300); }), "");           // past hi
  EXPECT_NE(error_of([&] { number("nan", 0.0, 1.0); }), "");             // never in range
  EXPECT_NE(error_of([&] { number("2147483648", 0, INT32_MAX); }), "");  // does not fit an int
}

TEST(ArgReader, ValuesRunToTheNextOption) {
  Args args{"--input", "a", "b", "--out", "o", "c"};
  ArgReader r("cmd", "u", args);
  ASSERT_TRUE(r.next() && r.is("--input"));
  EXPECT_EQ(r.values(), (std::vector<std::string>{"a", "b"}));
  ASSERT_TRUE(r.next() && r.is("--out"));
  EXPECT_EQ(r.values(), (std::vector<std::string>{"o", "c"}));
  EXPECT_FALSE(r.next());
}

}  // namespace
}  // namespace lattice::cli
