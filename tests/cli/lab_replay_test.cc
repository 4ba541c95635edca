// Replay in-process: the CSV dialect (quotes, CRLF, BOM, column order, blank lines,
// fractional milliseconds), event order, and errors that name line and column and
// leave the output empty.

#include <gtest/gtest.h>

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "bulwark/lab/input_error.h"
#include "bulwark/lab/replay.h"

namespace bulwark::lab {
namespace {

BreakerSpec consecutive(std::uint32_t n) {
  return BreakerConfig{.consecutive_failures = n, .open_duration = std::chrono::seconds(1)};
}

std::string summary(const std::string& out) {
  const auto at = out.rfind("{\"key\"");
  return at == std::string::npos ? "" : out.substr(at);
}

TEST(Replay, ColumnsInAnyOrderQuotesCrlfBomAndBlankLines) {
  const std::string csv =
      "\xEF\xBB\xBF"
      "outcome,duration_ms,key,t_ms\r\n"
      "failure,1.5,\"a,b\",0\r\n"  // completes at 1.5, after the next row's 1.25
      "\r\n"
      "failure,1,\"a,b\",0.25\r\n";
  const std::string out = replay_text(consecutive(2), csv, "t.csv", {.decisions = true});
  EXPECT_EQ(out,
            "{\"t_ms\":0,\"key\":\"a,b\",\"decision\":\"permitted\"}\n"
            "{\"t_ms\":0.25,\"key\":\"a,b\",\"decision\":\"permitted\"}\n"
            "{\"t_ms\":1.5,\"key\":\"a,b\",\"from\":\"closed\",\"to\":\"open\",\"reason\":"
            "\"consecutive_failures\"}\n"
            "{\"key\":\"a,b\",\"summary\":{\"permitted\":2,\"rejected\":0,\"success\":0,"
            "\"failure\":2,\"slow\":0,\"ignored\":0,\"opened\":1}}\n");
}

TEST(Replay, CompletionsRunBeforeArrivalsAtTheSameTimeAndInArrivalOrder) {
  // Two failures complete at 10; the arrival at 10 already sees the breaker open.
  const std::string csv =
      "t_ms,key,duration_ms,outcome\n"
      "0,k,10,failure\n"
      "5,k,5,failure\n"
      "10,k,1,success\n";
  const std::string out = replay_text(consecutive(2), csv, "t.csv", {.decisions = true});
  EXPECT_NE(out.find("{\"t_ms\":10,\"key\":\"k\",\"from\":\"closed\",\"to\":\"open\""),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("{\"t_ms\":10,\"key\":\"k\",\"decision\":\"rejected\"}"), std::string::npos)
      << out;
}

TEST(Replay, KeysAreEscapedAsJson) {
  const std::string csv = "t_ms,key,duration_ms,outcome\n0,\"tab\tand \\ slash\",1,success\n";
  const std::string out = replay_text(consecutive(2), csv);
  EXPECT_NE(out.find("\"key\":\"tab\\tand \\\\ slash\""), std::string::npos) << out;
}

TEST(Replay, AnEmptyTraceHasNoKeysAndNoOutput) {
  EXPECT_EQ(replay_text(consecutive(2), "t_ms,key,duration_ms,outcome\n"), "");
}

TEST(Replay, SlowCountsPermittedCallsOverTheSlowCallDuration) {
  const BreakerSpec s = CountWindowConfig{.slow_call_duration = std::chrono::milliseconds(100),
                                          .consecutive_failures = 5};
  const std::string csv =
      "t_ms,key,duration_ms,outcome\n"
      "0,k,100,success\n"      // exactly the threshold: not slow
      "0,k,100.001,success\n"  // slow
      "0,k,500,failure\n"      // slow failure
      "0,k,500,ignored\n";     // ignored calls are not judged
  EXPECT_EQ(summary(replay_text(s, csv)),
            "{\"key\":\"k\",\"summary\":{\"permitted\":4,\"rejected\":0,\"success\":2,"
            "\"failure\":1,\"slow\":2,\"ignored\":1,\"opened\":0}}\n");
}

void expect_error(const std::string& csv, const std::string& where, const std::string& field,
                  const std::string& says) {
  try {
    const std::string out = replay_text(consecutive(1), csv, "t.csv");
    ADD_FAILURE() << "no error; output:\n" << out;
  } catch (const InputError& e) {
    EXPECT_EQ(e.where().to_string(), where) << e.what();
    EXPECT_EQ(e.field(), field) << e.what();
    EXPECT_NE(e.message().find(says), std::string::npos) << e.what();
  }
}

TEST(Replay, MalformedInputNamesLineColumnAndField) {
  const std::string h = "t_ms,key,duration_ms,outcome\n";
  expect_error(h + "0,a,1,success\n1,a,1,sucess\n", "t.csv:3:7", "outcome",
               "unknown outcome \"sucess\" (expected success, failure or ignored)");
  expect_error(h + "10,a,1,success\n9.5,a,1,success\n", "t.csv:3:1", "t_ms",
               "goes back in time: 9.5 after 10 on line 2");
  expect_error("t_ms,key,outcome\n0,a,success\n", "t.csv:1", "duration_ms", "missing column");
  expect_error("t_ms,key,duration_ms,outcome,extra\n", "t.csv:1:30", "extra",
               "unknown column \"extra\"");
  expect_error("t_ms,key,t_ms,outcome\n", "t.csv:1:10", "t_ms", "appears twice");
  expect_error(h + "0,a,-5,success\n", "t.csv:2:5", "duration_ms", "must not be negative (got -5)");
  expect_error(h + "-1,a,5,success\n", "t.csv:2:1", "t_ms", "must not be negative");
  expect_error(h + "0,a,-0,success\n", "t.csv:2:5", "duration_ms", "must not be negative");
  expect_error(h + "x,a,5,success\n", "t.csv:2:1", "t_ms", "expected a number of milliseconds");
  expect_error(h + " 1,a,5,success\n", "t.csv:2:1", "t_ms", "expected a number of milliseconds");
  expect_error(h + "1,a,,success\n", "t.csv:2:5", "duration_ms", "expected a number");
  expect_error(h + "1,a,nan,success\n", "t.csv:2:5", "duration_ms", "finite");
  expect_error(h + "1,a,1e20,success\n", "t.csv:2:5", "duration_ms", "too large");
  expect_error(h + "1,a,5\n", "t.csv:2", "outcome", "missing field");
  expect_error(h + "1\n", "t.csv:2", "key",
               "missing field (the row has 1 field; the header has 4 fields)");
  expect_error(h + "1,a,5,success,x\n", "t.csv:2:15", "", "too many fields");
  expect_error(h + "1,\"a,5,success\n", "t.csv:2:3", "", "unterminated quoted field");
  expect_error(h + "1,\"a\"b,5,success\n", "t.csv:2:6", "", "unexpected character after a quoted");
  expect_error(h + "1,\xff,5,success\n", "t.csv:2:3", "key", "not valid UTF-8");
  expect_error("", "t.csv:1", "", "is empty: expected the header");
}

TEST(Replay, ScientificNotationAndFractionsAreMilliseconds) {
  const std::string csv = "t_ms,key,duration_ms,outcome\n1.5e3,k,2.5e-1,failure\n";
  const std::string out = replay_text(consecutive(1), csv);
  EXPECT_EQ(out.rfind("{\"t_ms\":1500.25,\"key\":\"k\",\"from\":\"closed\"", 0), 0u) << out;
}

// Unix-epoch milliseconds (~1.7e12) do not fit a double to the nanosecond: the times
// are read as decimal text, exactly.
TEST(Replay, EpochMillisecondsArePrintedExactly) {
  const std::string csv =
      "t_ms,key,duration_ms,outcome\n"
      "1732000000123,k,0.5,failure\n"
      "1732000000123.000001,k,1,success\n"
      "1732000000124.25,k,1,success\n";
  EXPECT_EQ(replay_text(consecutive(1), csv, "t.csv", {.decisions = true}),
            "{\"t_ms\":1732000000123,\"key\":\"k\",\"decision\":\"permitted\"}\n"
            "{\"t_ms\":1732000000123.000001,\"key\":\"k\",\"decision\":\"permitted\"}\n"
            "{\"t_ms\":1732000000123.5,\"key\":\"k\",\"from\":\"closed\",\"to\":\"open\","
            "\"reason\":\"consecutive_failures\"}\n"
            "{\"t_ms\":1732000000124.25,\"key\":\"k\",\"decision\":\"rejected\"}\n"
            "{\"key\":\"k\",\"summary\":{\"permitted\":2,\"rejected\":1,\"success\":1,"
            "\"failure\":1,\"slow\":0,\"ignored\":0,\"opened\":1}}\n");
}

// A completion at t + d runs before an arrival at the same t + d, however large t is:
// the epoch trace replays exactly as the same trace shifted to 0.
TEST(Replay, EpochMillisecondsKeepCompletionsBeforeArrivalsAtEqualTimes) {
  const std::string at_epoch =
      "t_ms,key,duration_ms,outcome\n"
      "1732000000000,k,1,failure\n"
      "1732000000001,k,1,success\n";
  const std::string at_zero =
      "t_ms,key,duration_ms,outcome\n"
      "0,k,1,failure\n"
      "1,k,1,success\n";
  const std::string epoch = replay_text(consecutive(1), at_epoch, "t.csv", {.decisions = true});
  const std::string zero = replay_text(consecutive(1), at_zero, "t.csv", {.decisions = true});
  EXPECT_NE(epoch.find("{\"t_ms\":1732000000001,\"key\":\"k\",\"decision\":\"rejected\"}"),
            std::string::npos)
      << epoch;
  std::string shifted = epoch;
  for (const auto& [from, to] : {std::pair{"\"t_ms\":1732000000000,", "\"t_ms\":0,"},
                                 std::pair{"\"t_ms\":1732000000001,", "\"t_ms\":1,"}}) {
    for (std::size_t at; (at = shifted.find(from)) != std::string::npos;) {
      shifted.replace(at, std::string_view(from).size(), to);
    }
  }
  EXPECT_EQ(shifted, zero);
}

TEST(Replay, DecimalMillisecondsAreExactToTheNanosecond) {
  const std::string h = "t_ms,key,duration_ms,outcome\n";
  // Trailing zeros past the nanosecond, exponents and a bare point change nothing.
  EXPECT_EQ(replay_text(consecutive(1), h + "1.732e12,k,1.5000000000,failure\n")
                .rfind("{\"t_ms\":1732000000001.5,", 0),
            0u);
  EXPECT_EQ(replay_text(consecutive(1), h + ".5,k,2.,failure\n").rfind("{\"t_ms\":2.5,", 0), 0u);
  EXPECT_EQ(replay_text(consecutive(1), h + "0,k,1e-6,failure\n").rfind("{\"t_ms\":0.000001,", 0),
            0u);
  EXPECT_EQ(replay_text(consecutive(1), h + "4000000000000,k,0,failure\n")
                .rfind("{\"t_ms\":4000000000000,", 0),
            0u);
}

TEST(Replay, TimesFinerThanANanosecondOrPastTheRangeAreErrors) {
  const BreakerSpec spec = consecutive(1);
  const auto error = [&](const std::string& row) -> std::string {
    try {
      replay_text(spec, "t_ms,key,duration_ms,outcome\n" + row + "\n", "t.csv");
    } catch (const InputError& e) {
      return e.what();
    }
    return "no error";
  };
  EXPECT_EQ(error("1732000000000.0000001,k,1,success"),
            "t.csv:2:1: t_ms: has more than 6 decimal places (got 1732000000000.0000001): times "
            "are whole nanoseconds, at most 0.000001 ms apart");
  EXPECT_NE(error("0,k,5e-7,success").find("t.csv:2:5: duration_ms: has more than 6 decimal"),
            std::string::npos);
  EXPECT_NE(error("4000000000000.000001,k,1,success").find("t.csv:2:1: t_ms: is too large"),
            std::string::npos);
  EXPECT_NE(error("0,k,9223372036854775808,success").find("t.csv:2:5: duration_ms: is too large"),
            std::string::npos);
  EXPECT_NE(error("0,k,1e999999999999,success").find("duration_ms: is too large"),
            std::string::npos);
  EXPECT_NE(error("0,k,1e,success").find("duration_ms: expected a number of milliseconds"),
            std::string::npos);
  EXPECT_NE(error("0,k,.,success").find("duration_ms: expected a number of milliseconds"),
            std::string::npos);
  EXPECT_NE(error("0,k,+1,success").find("duration_ms: expected a number of milliseconds"),
            std::string::npos);
  EXPECT_NE(error("0,k,-inf,success").find("duration_ms: expected a finite number"),
            std::string::npos);
}

// Errors quote what they found with its unprintable bytes escaped: never a raw carriage
// return (which would hide the start of the message) or a broken character.
TEST(Replay, ErrorsEscapeUnprintableAndInvalidBytes) {
  const std::string h = "t_ms,key,duration_ms,outcome\n";
  expect_error(h + "0,k,1,succ\xff\n", "t.csv:2:7", "outcome",
               "unknown outcome \"succ\\xff\" (expected");
  expect_error(h + "0,k,1,bad\x01\x7f\"\\\n", "t.csv:2:7", "outcome",
               "unknown outcome \"bad\\x01\\x7f\\\"\\\\\" (expected");
  expect_error(h + "0,k,1,caf\xc3\xa9\n", "t.csv:2:7", "outcome",
               "unknown outcome \"caf\xc3\xa9\"");
  expect_error("t_ms,key,duration_ms,outcome,\xfe\n", "t.csv:1:30", "\\xfe",
               "unknown column \"\\xfe\"");
  expect_error("t_ms,key,duration_ms,\"out\rcome\"\n", "t.csv:1", "", "carriage return");
  try {
    replay_text(consecutive(1), "t_ms,key,duration_ms,outcome\r0,k,1,success\r", "t.csv");
    ADD_FAILURE();
  } catch (const InputError& e) {
    const std::string what = e.what();
    EXPECT_EQ(what.find('\r'), std::string::npos) << what;
    EXPECT_EQ(what,
              "t.csv:1: the header line holds a carriage return (\\r): lines must end in LF or "
              "CRLF, not CR alone (got \"t_ms,key,duration_ms,outcome\\r0,k,1,success\\r\")");
  }
  for (const char* c : {"\x80", "\xc0\xaf", "\xed\xa0\x80", "\xf4\x90\x80\x80", "\xe2\x82"}) {
    try {
      replay_text(consecutive(1), h + "0,k,1," + c + "\n", "t.csv");
      ADD_FAILURE() << c;
    } catch (const InputError& e) {
      const std::string m = e.message();
      for (char ch : m) EXPECT_LT(static_cast<unsigned char>(ch), 0x80) << m;
    }
  }
}

TEST(Replay, ATraceWithoutAHeaderSaysSo) {
  expect_error("0,k,1,success\n1,k,1,success\n", "t.csv:1", "",
               "missing header: the first line must be the header t_ms,key,duration_ms,outcome "
               "(got \"0,k,1,success\")");
  expect_error("1732000000000,payments,120,success\n", "t.csv:1", "", "missing header");
}

TEST(Replay, NothingIsWrittenWhenALaterRowIsBad) {
  // The breaker opens on row 2, but row 4 is malformed: no transition line may be
  // written as if the replay had succeeded.
  std::string csv = "t_ms,key,duration_ms,outcome\n0,k,1,failure\n1,k,1,failure\n";
  for (int i = 0; i < 1000; ++i) csv += "2,k,1,success\n";
  csv += "3,k,1,bogus\n";
  char* data = nullptr;
  std::size_t size = 0;
  std::FILE* out = open_memstream(&data, &size);
  ASSERT_NE(out, nullptr);
  std::FILE* in = fmemopen(csv.data(), csv.size(), "r");
  ASSERT_NE(in, nullptr);
  EXPECT_THROW(replay(consecutive(1), in, "t.csv", out), InputError);
  std::fclose(in);
  std::fclose(out);
  EXPECT_EQ(size, 0u) << std::string(data, size);
  std::free(data);
}

TEST(Replay, AnOutputLargerThanWhatIsHeldInMemoryIsWrittenWholeOrNotAtAll) {
  // One decision line per row: about 2 MB of output, past the 1 MiB held in memory.
  std::string csv = "t_ms,key,duration_ms,outcome\n";
  std::string expected;
  for (int i = 0; i < 40'000; ++i) {
    csv += std::to_string(i) + ",k,1,success\n";
    expected += "{\"t_ms\":" + std::to_string(i) + ",\"key\":\"k\",\"decision\":\"permitted\"}\n";
  }
  expected +=
      "{\"key\":\"k\",\"summary\":{\"permitted\":40000,\"rejected\":0,\"success\":40000,"
      "\"failure\":0,\"slow\":0,\"ignored\":0,\"opened\":0}}\n";
  ASSERT_GT(expected.size(), std::size_t{1} << 20);
  EXPECT_EQ(replay_text(consecutive(1), csv, "t.csv", {.decisions = true}), expected);

  csv += "40000,k,1,bogus\n";
  char* data = nullptr;
  std::size_t size = 0;
  std::FILE* out = open_memstream(&data, &size);
  ASSERT_NE(out, nullptr);
  std::FILE* in = fmemopen(csv.data(), csv.size(), "r");
  ASSERT_NE(in, nullptr);
  EXPECT_THROW(replay(consecutive(1), in, "t.csv", out, {.decisions = true}), InputError);
  std::fclose(in);
  std::fclose(out);
  EXPECT_EQ(size, 0u);
  std::free(data);
}

TEST(Replay, ProgressHearsTheRowsAndTheEndBeforeTheOutput) {
  std::string csv = "t_ms,key,duration_ms,outcome\n";
  for (int i = 0; i < 10; ++i) csv += std::to_string(i) + ",k,1,success\n";
  struct Heard {
    std::vector<std::pair<std::uint64_t, bool>> calls;
  } heard;
  ReplayOptions options;
  options.progress = [](std::uint64_t rows, bool done, void* h) {
    static_cast<Heard*>(h)->calls.emplace_back(rows, done);
  };
  options.progress_context = &heard;
  const std::string out = replay_text(consecutive(1), csv, "t.csv", options);
  EXPECT_NE(out.find("\"permitted\":10"), std::string::npos) << out;
  ASSERT_EQ(heard.calls.size(), 1u) << "fewer than 2^20 rows: only the end";
  EXPECT_EQ(heard.calls[0], std::make_pair(std::uint64_t{10}, true));
}

TEST(Replay, AnInputThatCannotBeRewoundIsReadOnce) {
  const std::string csv = "t_ms,key,duration_ms,outcome\n0,k,1,failure\n5,k,1,success\n";
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  ASSERT_EQ(write(fds[1], csv.data(), csv.size()), static_cast<ssize_t>(csv.size()));
  close(fds[1]);
  std::FILE* in = fdopen(fds[0], "r");
  char* data = nullptr;
  std::size_t size = 0;
  std::FILE* out = open_memstream(&data, &size);
  replay(consecutive(1), in, "<pipe>", out, {.decisions = true});
  std::fclose(in);
  std::fclose(out);
  const std::string s(data, size);
  std::free(data);
  EXPECT_NE(s.find("\"to\":\"open\""), std::string::npos) << s;
  EXPECT_NE(s.find("{\"t_ms\":5,\"key\":\"k\",\"decision\":\"rejected\"}"), std::string::npos) << s;
}

}  // namespace
}  // namespace bulwark::lab
