// lattice::Error and the check macros.
//
// Library code never prints or exits: it throws lattice::Error, which carries
// the host, the rank (set once at start-up by whoever knows it), the failed
// expression, file:line and a message. `main` catches, prints one line per
// failing rank and aborts the job so peers do not hang in a collective.
//
//   LATTICE_CHECK(cond, "fmt {}", args...)   internal invariant
//   LATTICE_FAIL("fmt {}", args...)          unconditional failure
//   LATTICE_INPUT_CHECK / LATTICE_INPUT_FAIL  the same for bad user input (InputError)
//   The CUDA/cuBLAS/NCCL/MPI checks live beside their backends and throw the
//   same Error with the library's own message.
#pragma once

#include <fmt/format.h>

#include <stdexcept>
#include <string>

namespace lattice {

class Error : public std::runtime_error {
 public:
  Error(std::string message, std::string expression, const char* file, int line);
  const std::string& message() const { return message_; }
  const std::string& expression() const { return expression_; }
  // "host:rank R: message [expr at file:line]"
  std::string describe() const;

 private:
  std::string message_, expression_, file_;
  int line_;
};

// An error in what the user gave (a command line, an input file): its message
// names the argument or file, the value and the fix, so reports print it
// alone, without the host, expression and location an internal failure
// carries (LATTICE_INPUT_CHECK / LATTICE_INPUT_FAIL).
class InputError : public Error {
 public:
  using Error::Error;
};

// Identity used in error reports. The process-wide rank is diagnostic only;
// no library logic depends on it.
void set_error_rank(int rank);
int error_rank();
std::string host_name();

// The one line a report prints for an exception that is not a lattice::Error:
// its what(), except std::bad_alloc, whose what() names nothing, becomes
// "host rank R: out of host memory (std::bad_alloc) ..." with the fix.
std::string describe_exception(const std::exception& e);

[[noreturn]] void throw_error(std::string message, const char* expr, const char* file, int line);
[[noreturn]] void throw_input_error(std::string message, const char* expr, const char* file, int line);

}  // namespace lattice

// `throw_fn(message, #cond, __FILE__, __LINE__)` unless cond holds.
#define LATTICE_CHECK_THROWING_(throw_fn, cond, ...)                   \
  do {                                                                 \
    if (!(cond)) [[unlikely]]                                          \
      throw_fn(::fmt::format(__VA_ARGS__), #cond, __FILE__, __LINE__); \
  } while (0)

#define LATTICE_CHECK(cond, ...) LATTICE_CHECK_THROWING_(::lattice::throw_error, cond, __VA_ARGS__)
#define LATTICE_FAIL(...) ::lattice::throw_error(::fmt::format(__VA_ARGS__), "", __FILE__, __LINE__)
#define LATTICE_INPUT_CHECK(cond, ...) LATTICE_CHECK_THROWING_(::lattice::throw_input_error, cond, __VA_ARGS__)
#define LATTICE_INPUT_FAIL(...) ::lattice::throw_input_error(::fmt::format(__VA_ARGS__), "", __FILE__, __LINE__)
