#include "client/watch_decoder.h"

#include <random>
#include <string>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "client/api_error.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace informerd::client {
namespace {

using ::testing::HasSubstr;

std::string ConfigMap(absl::string_view name, absl::string_view rv, absl::string_view payload) {
  return absl::StrCat(R"j({"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":")j", name,
                      R"j(","namespace":"default","uid":"u-)j", name, R"j(","resourceVersion":")j", rv,
                      R"j(","labels":{"app":"caf\u00e9 ☕"}},"data":{"payload":")j", payload, R"j("}})j");
}

std::string Event(absl::string_view type, absl::string_view object) {
  return absl::StrCat(R"j({"type":")j", type, R"j(","object":)j", object, "}\n");
}

// A stream with every event type, a multi-byte label and a bookmark ending the initial events.
std::string MixedStream() {
  return Event("ADDED", ConfigMap("a", "10", "x")) + Event("MODIFIED", ConfigMap("a", "11", "yy")) +
         Event("DELETED", ConfigMap("a", "12", "yy")) +
         Event("BOOKMARK",
               R"j({"kind":"ConfigMap","apiVersion":"v1","metadata":{"resourceVersion":"13",)j"
               R"j("annotations":{"k8s.io/initial-events-end":"true"}}})j") +
         Event("ADDED", ConfigMap("b", "14", "zzz"));
}

struct Decoded {
  std::vector<std::string> summary;  // "TYPE key rv json-size"
  absl::Status status;
};

Decoded DecodeInChunks(absl::string_view stream, const std::vector<size_t>& cuts) {
  auto decoder = WatchDecoder::Create().value();
  Decoded out;
  std::vector<WatchEvent> events;
  size_t at = 0;
  std::vector<size_t> all = cuts;
  all.push_back(stream.size());
  for (size_t cut : all) {
    out.status = decoder->Feed(stream.substr(at, cut - at), &events);
    at = cut;
    if (!out.status.ok()) break;
  }
  if (out.status.ok()) out.status = decoder->Finish();
  for (const WatchEvent& e : events) {
    out.summary.push_back(absl::StrCat(WatchEventTypeName(e.type), " ", e.object->key(), " ",
                                       e.object->resource_version(), " ", e.object->json().size(),
                                       e.initial_events_end ? " end" : ""));
  }
  return out;
}

TEST(WatchDecoderTest, DecodesEveryEventType) {
  auto decoder = WatchDecoder::Create().value();
  std::vector<WatchEvent> events;
  ASSERT_TRUE(decoder->Feed(MixedStream(), &events).ok());
  ASSERT_EQ(events.size(), 5u);
  EXPECT_EQ(events[0].type, WatchEventType::kAdded);
  EXPECT_EQ(events[1].type, WatchEventType::kModified);
  EXPECT_EQ(events[2].type, WatchEventType::kDeleted);
  EXPECT_EQ(events[3].type, WatchEventType::kBookmark);
  EXPECT_TRUE(events[3].initial_events_end);
  EXPECT_EQ(events[3].object->resource_version(), "13");
  EXPECT_EQ(events[0].object->json(), ConfigMap("a", "10", "x"));
  EXPECT_EQ(events[0].object->key(), "default/a");
  EXPECT_EQ(events[0].object->label("app"), "café ☕");
  EXPECT_FALSE(events[0].initial_events_end);
  EXPECT_EQ(decoder->events_decoded(), 5u);
  EXPECT_TRUE(decoder->Finish().ok());
}

TEST(WatchDecoderTest, EverySplitPointGivesTheSameEvents) {
  const std::string stream = MixedStream();
  const Decoded whole = DecodeInChunks(stream, {});
  ASSERT_TRUE(whole.status.ok()) << whole.status;
  ASSERT_EQ(whole.summary.size(), 5u);
  for (size_t i = 0; i <= stream.size(); ++i) {
    Decoded d = DecodeInChunks(stream, {i});
    ASSERT_TRUE(d.status.ok()) << "split at " << i << ": " << d.status;
    ASSERT_EQ(d.summary, whole.summary) << "split at " << i;
  }
}

TEST(WatchDecoderTest, EveryPairOfSplitPointsGivesTheSameEvents) {
  const std::string stream =
      Event("ADDED", ConfigMap("a", "1", "p")) + Event("DELETED", ConfigMap("a", "2", "q"));
  const Decoded whole = DecodeInChunks(stream, {});
  for (size_t i = 0; i <= stream.size(); ++i) {
    for (size_t j = i; j <= stream.size(); ++j) {
      Decoded d = DecodeInChunks(stream, {i, j});
      ASSERT_TRUE(d.status.ok()) << i << "," << j << ": " << d.status;
      ASSERT_EQ(d.summary, whole.summary) << i << "," << j;
    }
  }
}

TEST(WatchDecoderTest, RandomChunkingGivesTheSameEvents) {
  std::string stream;
  for (int i = 0; i < 200; ++i) {
    stream += Event(i % 3 == 0 ? "ADDED" : "MODIFIED",
                    ConfigMap(absl::StrCat("cm-", i % 17), absl::StrCat(i + 1),
                              std::string(i * 37 % 3000, 'a' + i % 26)));
  }
  const Decoded whole = DecodeInChunks(stream, {});
  ASSERT_EQ(whole.summary.size(), 200u);
  std::mt19937 rng(42);
  for (int round = 0; round < 300; ++round) {
    std::vector<size_t> cuts;
    std::uniform_int_distribution<size_t> step(1, round % 2 ? 64 : 20000);
    for (size_t at = step(rng); at < stream.size(); at += step(rng)) cuts.push_back(at);
    Decoded d = DecodeInChunks(stream, cuts);
    ASSERT_TRUE(d.status.ok()) << "round " << round << ": " << d.status;
    ASSERT_EQ(d.summary, whole.summary) << "round " << round;
  }
}

TEST(WatchDecoderTest, DecodesMultiMebibyteObjectsArrivingInSmallChunks) {
  const std::string payload(6 << 20, 'q');
  const std::string stream = Event("ADDED", ConfigMap("big", "7", payload)) +
                             Event("MODIFIED", ConfigMap("small", "8", "s"));
  auto decoder = WatchDecoder::Create().value();
  std::vector<WatchEvent> events;
  for (size_t at = 0; at < stream.size(); at += 16384) {
    ASSERT_TRUE(decoder->Feed(absl::string_view(stream).substr(at, 16384), &events).ok());
  }
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[0].object->json(), ConfigMap("big", "7", payload));
  EXPECT_EQ(events[1].object->name(), "small");
  EXPECT_EQ(decoder->pending_bytes(), 0u);
}

TEST(WatchDecoderTest, ErrorEventEndsTheStreamWithItsStatus) {
  const std::string stream =
      Event("ADDED", ConfigMap("a", "1", "p")) +
      Event("ERROR", R"j({"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure",)j"
                     R"j("message":"too old resource version: 1 (5)","reason":"Expired","code":410})j") +
      Event("ADDED", ConfigMap("b", "2", "p"));
  auto decoder = WatchDecoder::Create().value();
  std::vector<WatchEvent> events;
  absl::Status s = decoder->Feed(stream, &events);
  EXPECT_TRUE(IsExpired(s)) << s;
  EXPECT_EQ(s.message(), "too old resource version: 1 (5)");
  EXPECT_EQ(ApiErrorCode(s), 410);
  ASSERT_EQ(events.size(), 1u);  // the event before the error, not the one after
  EXPECT_EQ(events[0].object->name(), "a");
  // The decoder stays failed.
  EXPECT_EQ(decoder->Feed(Event("ADDED", ConfigMap("c", "3", "p")), &events), s);
  EXPECT_EQ(decoder->Finish(), s);
  EXPECT_EQ(events.size(), 1u);
}

TEST(WatchDecoderTest, ErrorEventWithObjectBeforeTypeIsStillAnError) {
  auto decoder = WatchDecoder::Create().value();
  std::vector<WatchEvent> events;
  absl::Status s = decoder->Feed(
      R"j({"object":{"kind":"Status","status":"Failure","message":"boom","reason":"InternalError","code":500},"type":"ERROR"})j"
      "\n",
      &events);
  EXPECT_TRUE(client::IsInternalError(s)) << s;
  EXPECT_TRUE(events.empty());
}

TEST(WatchDecoderTest, GarbageIsDataLossNamingTheEvent) {
  const std::string good = Event("ADDED", ConfigMap("a", "1", "p"));
  const std::string garbage[] = {
      // The fake API server's "garbage" fault, embedded NUL included.
      std::string("{\"type\":\"MODIFIED\",\"object\":{\"kind\":\x00\xff\xfe garbage ]]}}\n", 53),
      "not json at all\n",
      "[1,2,3]\n",
      "{\"type\":\"ADDED\"}\n",
      "{\"object\":{}}\n",
      "{\"type\":\"EXPLODED\",\"object\":{}}\n",
      "{\"type\":7,\"object\":{}}\n",
      "{\"type\":\"ADDED\",\"object\":[]}\n",
      "{\"type\":\"ADDED\",\"object\":{\"metadata\":{\"name\":1}}}\n",
      "{\"type\":\"ADDED\",\"object\":{}} trailing\n",
      "{\"type\":\"ADDED\",\"object\":{\"a\":}}\n",
      "{\"type\":\"ERROR\",\"object\":{\"kind\":\"ConfigMap\"}}\n",
      "\"\\uD800\"\n",
  };
  for (const std::string& g : garbage) {
    auto decoder = WatchDecoder::Create().value();
    std::vector<WatchEvent> events;
    absl::Status s = decoder->Feed(good + g, &events);
    EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << absl::CHexEscape(g) << " -> " << s;
    EXPECT_THAT(std::string(s.message()), HasSubstr("event 2 at byte " + std::to_string(good.size())))
        << s;
    EXPECT_EQ(events.size(), 1u);
  }
}

TEST(WatchDecoderTest, TruncatedStreamIsDataLossAtFinish) {
  const std::string event = Event("ADDED", ConfigMap("a", "1", "p"));
  for (size_t cut = 1; cut < event.size() - 1; ++cut) {
    auto decoder = WatchDecoder::Create().value();
    std::vector<WatchEvent> events;
    ASSERT_TRUE(decoder->Feed(event + event.substr(0, cut), &events).ok());
    EXPECT_EQ(events.size(), 1u);
    absl::Status s = decoder->Finish();
    EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << cut;
    EXPECT_THAT(std::string(s.message()), HasSubstr("ended in the middle of event 2"));
  }
}

TEST(WatchDecoderTest, EventsLargerThanTheLimitAreRefused) {
  auto decoder = WatchDecoder::Create({.max_event_bytes = 1000}).value();
  std::vector<WatchEvent> events;
  EXPECT_TRUE(decoder->Feed(Event("ADDED", ConfigMap("a", "1", "small")), &events).ok());
  // Without a newline yet: refused as soon as the pending bytes pass the limit.
  absl::Status s = decoder->Feed(std::string(1001, ' '), &events);
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
  auto other = WatchDecoder::Create({.max_event_bytes = 1000}).value();
  s = other->Feed(Event("ADDED", ConfigMap("a", "1", std::string(2000, 'x'))), &events);
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
}

TEST(WatchDecoderTest, BlankLinesAndCarriageReturnsAreIgnored) {
  const std::string stream = "\n\r\n" + Event("ADDED", ConfigMap("a", "1", "p")).insert(0, "  ") +
                             "\r\n" + Event("DELETED", ConfigMap("a", "2", "p"));
  Decoded d = DecodeInChunks(stream, {3, 50});
  ASSERT_TRUE(d.status.ok()) << d.status;
  EXPECT_EQ(d.summary.size(), 2u);
}

TEST(WatchDecoderTest, CompactOptionStripsWhitespace) {
  auto decoder = WatchDecoder::Create({.compact = true}).value();
  std::vector<WatchEvent> events;
  ASSERT_TRUE(decoder->Feed("{\"type\": \"ADDED\", \"object\": { \"metadata\" : { \"name\" : \"a\" } } }\n",
                            &events).ok());
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].object->json(), R"j({"metadata":{"name":"a"}})j");
}

}  // namespace
}  // namespace informerd::client
