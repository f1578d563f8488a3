// memscope --attach (issue 22): the app shows a run served by another engine over loopback as if
// it were local; what the run refuses (rewind, fork, restart knobs) is greyed out with the reason,
// and a run that ends leaves the view and says so.
#include <catch2/catch.hpp>

#include "app/app_harness.h"
#include "model/config/knobs.h"
#include "model/engine/engine.h"
#include "model/remote/remote_server.h"

using memscope::test::AppHarness;
namespace model = memscope::model;

namespace {

bool has_event(const std::vector<model::Event>& events, const std::string& part) {
  for (const auto& e : events)
    if (e.message.find(part) != std::string::npos) return true;
  return false;
}

}  // namespace

TEST_CASE("app: an attached run steps, takes live knobs and greys out what it refuses", "[gui]") {
  model::EngineOptions eo;
  eo.sets = {"model.d_model=16", "model.memory_heads=2", "model.attention_heads=2", "train.batch=2", "engine.mode=train",
             "probe.matrices_every=1"};
  model::Engine engine(eo);
  model::ServeOptions so;
  so.token = "app";
  so.label = "train test";
  so.refused = {{"rewind", "the run's own"}, {"fork", "the run's own"}, {model::kRestartKnob, "would throw the steps away"}};
  so.admit = [](const model::Command& c) {
    if (c.kind == model::Command::Kind::SetKnob && !model::knob_is_live(c.knob)) throw model::UserError("would throw the steps away");
    return c;
  };
  auto server = std::make_shared<model::RemoteServer>(engine, so);
  engine.add_sink(server);
  engine.start();
  server->start();
  {
    memscope::app::GuiOptions o;
    o.attach = server->endpoint().text();
    o.token = "app";
    AppHarness h(o);
    REQUIRE(h.app().main().remote());
    CHECK(h.app().main().label == "attached train test at " + server->endpoint().text());
    h.app().step(2);
    h.settle();
    REQUIRE(h.app().main().steps() == 2);
    CHECK(engine.status().steps.front() == 2);
    h.frames(3);
    CHECK(h.app().rects().count("matrix/0/0/0/0/M/M") == 1);  // the run's matrices, drawn here
    CHECK(h.app().rects().count("transport/remote") == 1);

    // Fork is greyed out: a click does nothing, here or in the run.
    h.click("transport/fork");
    h.frames(3);
    CHECK(h.app().view().banner.empty());
    CHECK(engine.timelines() == 1);

    // A live knob from the knobs panel's path reaches the run; a restart knob is refused there with
    // the reason, and no local run is started beside it.
    h.app().post(model::Command::set_knob("train.lr", "0.01"));
    h.app().post(model::Command::set_knob("model.d_model", "32"));
    h.settle();
    CHECK(has_event(engine.events(), "set train.lr = 0.01"));
    CHECK(h.app().runs().size() == 1);
    h.frames(5);
    CHECK(h.app().view().banner.find("would throw the steps away") != std::string::npos);

    // The run ends: the view stays, and the transport says why it is detached.
    server->stop("the run finished at step 2");
    CHECK(h.frames_until([&] { return !h.app().main().status.connected; }));
    CHECK(h.app().main().status.last_error.find("the run finished at step 2") != std::string::npos);
    CHECK(h.app().main().steps() == 2);
    h.screenshot("attach-detached");
  }
  engine.stop();
}
