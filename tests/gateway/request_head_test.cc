// The request-head checks against smuggling (what Boost.Beast's parser lets through) and the
// memory budget of bodies being read.
#include <gtest/gtest.h>

#include <boost/beast/http/fields.hpp>

#include <string>

#include "gateway/http/body_budget.h"
#include "gateway/http/request_head.h"

namespace tokenmill::gateway {
namespace {

namespace http = boost::beast::http;

http::fields Fields(std::initializer_list<std::pair<http::field, std::string>> list) {
  http::fields fields;
  for (const auto& [name, value] : list) fields.insert(name, value);
  return fields;
}

TEST(RequestHead, FoldedLinesAreRefused) {
  EXPECT_FALSE(FoldedLineProblem("POST / HTTP/1.1\r\nHost: x\r\nA: b\r\n\r\n"));
  EXPECT_TRUE(FoldedLineProblem("POST / HTTP/1.1\r\nHost: x\r\nA: b\r\n c\r\n\r\n"));
  EXPECT_TRUE(FoldedLineProblem("POST / HTTP/1.1\r\nHost: x\r\nA: b\r\n\tc\r\n\r\n"));
  EXPECT_TRUE(FoldedLineProblem("POST / HTTP/1.1\r\n Host: x\r\n\r\n"));
  // A space inside a value is no fold.
  EXPECT_FALSE(FoldedLineProblem("POST / HTTP/1.1\r\nHost: x\r\nA: b  c\r\n\r\n"));
}

TEST(RequestHead, OnlyChunkedAloneIsATransferEncoding) {
  const auto host = std::pair{http::field::host, std::string("x")};
  EXPECT_FALSE(FramingProblem(Fields({host, {http::field::transfer_encoding, "chunked"}}), 11));
  EXPECT_FALSE(FramingProblem(Fields({host, {http::field::transfer_encoding, "Chunked"}}), 11));
  for (const char* coding : {"gzip, chunked", "identity", "xchunked", "chunked, gzip", ""}) {
    const auto problem =
        FramingProblem(Fields({host, {http::field::transfer_encoding, coding}}), 11);
    ASSERT_TRUE(problem) << coding;
    EXPECT_NE(problem->find("must be 'chunked' alone"), std::string::npos) << *problem;
  }
  EXPECT_TRUE(FramingProblem(Fields({host,
                                     {http::field::transfer_encoding, "identity"},
                                     {http::field::transfer_encoding, "chunked"}}),
                             11));
  EXPECT_TRUE(FramingProblem(Fields({host,
                                     {http::field::transfer_encoding, "chunked"},
                                     {http::field::content_length, "2"}}),
                             11));
  EXPECT_TRUE(FramingProblem(Fields({{http::field::transfer_encoding, "chunked"}}), 10));
}

TEST(RequestHead, Http11NeedsExactlyOneHost) {
  EXPECT_FALSE(FramingProblem(Fields({{http::field::host, "x"}}), 11));
  EXPECT_FALSE(FramingProblem(Fields({{http::field::host, ""}}), 11));  // allowed empty
  EXPECT_TRUE(FramingProblem(Fields({}), 11));
  EXPECT_TRUE(FramingProblem(Fields({{http::field::host, "x"}, {http::field::host, "y"}}), 11));
  EXPECT_FALSE(FramingProblem(Fields({}), 10));  // HTTP/1.0 has no Host requirement
}

TEST(BodyBudget, ChargesGrowUntilTheBudgetAndGiveBackWhenRefusedOrEnded) {
  BodyBudget budget(100);
  {
    BodyCharge first(budget);
    EXPECT_TRUE(first.Grow(60));
    BodyCharge second(budget);
    EXPECT_TRUE(second.Grow(40));
    EXPECT_EQ(budget.in_use(), 100u);
    EXPECT_FALSE(second.Grow(1));
    EXPECT_TRUE(second.refused());
    EXPECT_FALSE(first.refused());
    EXPECT_EQ(budget.in_use(), 60u);  // the refused body's 40 went back at once
    EXPECT_TRUE(first.Grow(40));
    EXPECT_FALSE(second.Grow(1));  // refused stays refused
  }
  EXPECT_EQ(budget.in_use(), 0u);
}

}  // namespace
}  // namespace tokenmill::gateway
