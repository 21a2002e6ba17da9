// Several models on one server (cli/serve/model_spec, model_budget, model_set): the --model specs
// and their refusals word for word; the budget decision (footprint from the plan, equal shares,
// least recently used idle models unloaded for room, the 507's exact message); a ModelSet over
// in-process engines loading on first use, routing each request to its own model's scheduler
// (over HTTP: the same answers as a server of that model alone), 404 for an unknown id, and
// unloading after --idle-unload, never while a request holds a place.
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/serve/http_server.hpp"
#include "cli/serve/model_budget.hpp"
#include "cli/serve/model_set.hpp"
#include "cli/serve/model_spec.hpp"
#include "tests/cli/cli_test_support.hpp"
#include "tests/serve/http_client.hpp"

namespace waste::serve {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using namespace std::chrono_literals;

constexpr int kCtx = 256;

void fake_container(const fs::path& dir) {
  fs::create_directories(dir);
  test::write_text(dir / "manifest.json", "{}");
}

// `waste synth --preset tiny --tokenizer --seed 7`: the tiny shapes with other weights.
const fs::path& other_container() {
  static test::ScratchDir dir;
  static fs::path model;
  if (model.empty()) {
    const fs::path out = dir.path() / "other.waste";
    const test::Ran ran = test::run_waste({"synth", "--preset", "tiny", "--tokenizer", "--seed", "7", "--out", out.string()});
    INFO(ran.err);
    REQUIRE(ran.rc == 0);
    model = out;
  }
  return model;
}

// A model opened in this process (no daemon): engine, tokenizer, scheduler. Counts its unloads.
struct TestModel final : LoadedModel {
  std::unique_ptr<Engine> engine;
  std::optional<Tokenizer> tokenizer;
  std::optional<Scheduler> scheduler;
  std::atomic<int>* unloads = nullptr;
  ~TestModel() override {
    scheduler.reset();
    if (unloads) ++*unloads;
  }
};

struct LoaderLog {
  std::atomic<int> loads{0}, unloads{0};
  std::vector<std::uint64_t> budgets;  // the budget each load was given (the loader thread's)
};

ModelLoader test_loader(LoaderLog& log) {
  return [&log](const ModelSpec& spec, std::uint64_t budget_bytes) -> Result<std::unique_ptr<LoadedModel>> {
    auto model = std::make_unique<TestModel>();
    EngineOptions o;
    o.model = spec.path;
    o.threads = 1;
    o.ctx_tokens = kCtx;
    auto engine = Engine::open(o);
    if (!engine) return std::unexpected(engine.error());
    model->engine = std::move(*engine);
    auto tokenizer = Tokenizer::load(spec.path);
    if (!tokenizer) return std::unexpected(tokenizer.error());
    model->tokenizer.emplace(std::move(*tokenizer));
    model->scheduler.emplace(*model->engine, *model->tokenizer, SchedulerOptions{2, 8, 64, 0});
    model->serve = {&*model->scheduler, &*model->tokenizer, nullptr, nullptr, {}, nullptr};
    model->summary = "test";
    model->unloads = &log.unloads;
    log.budgets.push_back(budget_bytes);
    ++log.loads;
    return std::unique_ptr<LoadedModel>(std::move(model));
  };
}

// Waits (bounded) for a Waiter's load and claims its place.
ModelSet::Acquired wait_and_claim(ModelSet& set, ModelSet::Acquired got) {
  if (auto* waiter = std::get_if<ModelSet::Waiter>(&got)) {
    const auto deadline = std::chrono::steady_clock::now() + 60s;
    while (!waiter->done() && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(10ms);
    REQUIRE(waiter->done());
    return set.claim(std::move(*waiter));
  }
  return got;
}

bool wait_for_state(const ModelSet& set, const std::string& id, ModelState want, std::chrono::milliseconds limit) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < deadline) {
    if (set.state(id) == want) return true;
    std::this_thread::sleep_for(10ms);
  }
  return set.state(id) == want;
}

GenerationJob greedy_job(int first) {
  GenerationJob job;
  for (int i = 0; i < 12; ++i) job.prompt.push_back((first + i * 17) % 200 + 5);
  job.max_tokens = 8;
  job.top_logprobs = 0;
  return job;
}

std::vector<int> run(Scheduler& scheduler, GenerationJob job, Admission ticket) {
  auto stream = scheduler.submit(std::move(job), std::move(ticket));
  REQUIRE(stream);
  std::vector<int> ids;
  for (bool finished = false; !finished;) {
    std::vector<Delta> deltas;
    finished = (*stream)->take(deltas, 200ms);
    for (const Delta& d : deltas) {
      if (d.logprob) ids.push_back(d.logprob->token);
    }
  }
  return ids;
}

std::vector<int> alone(const fs::path& model, const GenerationJob& job) {
  EngineOptions o;
  o.model = model;
  o.threads = 1;
  o.ctx_tokens = kCtx;
  auto engine = Engine::open(o);
  REQUIRE(engine);
  GenerateParams p;
  p.max_tokens = job.max_tokens;
  p.eos_token = -2;
  auto r = (*engine)->generate(job.prompt, p);
  REQUIRE(r);
  return r->tokens;
}

}  // namespace

TEST_CASE("serve --model: PATH, PATH=ID and a directory of containers expand in order", "[serve][models]") {
  test::ScratchDir dir;
  const fs::path root = dir.path();
  fake_container(root / "a.waste");
  fake_container(root / "many" / "y");
  fake_container(root / "many" / "x.waste");
  fs::create_directories(root / "many" / "not-a-container");
  auto specs = expand_model_specs({(root / "a.waste").string(), (root / "a.waste").string() + "=alpha/1"});
  REQUIRE_FALSE(specs);  // the same container twice
  specs = expand_model_specs({(root / "a.waste").string() + "=alpha/1", (root / "many").string()});
  REQUIRE(specs);
  REQUIRE(specs->size() == 3);
  CHECK((*specs)[0].id == "alpha/1");
  CHECK((*specs)[0].path == root / "a.waste");
  CHECK((*specs)[1].id == "x");
  CHECK((*specs)[1].path == root / "many" / "x.waste");
  CHECK((*specs)[2].id == "y");
  CHECK(default_model_id("/m/kimi-k2.5.waste") == "kimi-k2.5");
  CHECK(default_model_id("/m/kimi-k2.5") == "kimi-k2.5");
  CHECK(valid_model_id("org/model:q3_k-1.0"));
  CHECK_FALSE(valid_model_id("/abs"));
  CHECK_FALSE(valid_model_id(".hidden"));
  CHECK_FALSE(valid_model_id("a b"));
  CHECK_FALSE(valid_model_id(std::string(129, 'a')));
}

TEST_CASE("serve --model: bad specs, duplicate ids and missing paths are refused in words", "[serve][models]") {
  test::ScratchDir dir;
  const fs::path root = dir.path();
  const std::string r = root.string();
  fake_container(root / "a.waste");
  fake_container(root / "many" / "a");
  fs::create_directories(root / "empty");
  test::write_text(root / "file", "x");
  const auto refusal = [](std::vector<std::string> specs) {
    auto expanded = expand_model_specs(specs);
    REQUIRE_FALSE(expanded);
    CHECK(expanded.error().code == Errc::argument);
    return expanded.error().message;
  };
  CHECK(refusal({r + "/missing"}) == "--model '" + r + "/missing': " + r + "/missing does not exist");
  CHECK(refusal({r + "/missing=m"}) == "--model '" + r + "/missing=m': " + r + "/missing does not exist");
  CHECK(refusal({""}) == "--model '': empty (use --model PATH or --model PATH=ID)");
  CHECK(refusal({"=m"}) == "--model '=m': no path before '='");
  CHECK(refusal({r + "/a.waste="}) == "--model '" + r + "/a.waste=': empty id after '='");
  CHECK(refusal({r + "/a.waste=a b"}) == "--model '" + r + "/a.waste=a b': 'a b' is not a valid model id (1 to 128 of "
                                                             "A-Z a-z 0-9 . _ : - /, not starting with / or .)");
  CHECK(refusal({r + "/file"}) ==
        "--model '" + r + "/file': " + r + "/file is not a directory (a model is a container directory holding manifest.json)");
  CHECK(refusal({r + "/empty"}) == "--model '" + r + "/empty': " + r +
                                       "/empty is neither a container (no manifest.json) nor a directory holding containers");
  CHECK(refusal({r + "/many=m"}) == "--model '" + r + "/many=m': " + r +
                                        "/many is a directory of containers; an id names one container (give it as "
                                        "--model " + r + "/many/NAME=ID)");
  CHECK(refusal({r + "/a.waste", r + "/many"}) == "--model: id 'a' names two models (" + r + "/a.waste and " + r +
                                                       "/many/a); give one another id with --model PATH=ID");
  CHECK(refusal({r + "/a.waste=one", r + "/a.waste/=two"}) ==
        "--model: " + r + "/a.waste is given twice (as 'one' and 'two')");
}

TEST_CASE("waste serve: --model and MODEL refusals reach stderr before anything opens", "[serve][models][cli]") {
  test::ScratchDir dir;
  const std::string missing = (dir.path() / "nope.waste").string();
  auto ran = test::run_waste({"serve", "--model", missing, "--port", "0"});
  CHECK(ran.rc == 1);
  CHECK(ran.err == "waste serve: --model '" + missing + "': " + missing + " does not exist\n");
  ran = test::run_waste({"serve", "--port", "0"});
  CHECK(ran.rc == 1);
  CHECK(ran.err == "waste serve: a model is required: MODEL, or --model PATH[=ID] (repeatable)\n");
  const std::string tiny = test::tokenizer_container().string();
  ran = test::run_waste({"serve", tiny, "--model", tiny, "--port", "0"});
  CHECK(ran.rc == 1);
  CHECK(ran.err == "waste serve: give the model either as MODEL or with --model, not both\n");
  ran = test::run_waste({"serve", "--model", tiny, "--model", tiny + "=again", "--port", "0"});
  CHECK(ran.rc == 1);
  CHECK(ran.err == "waste serve: --model: " + fs::weakly_canonical(tiny).string() + " is given twice (as 'tiny' and 'again')\n");
  ran = test::run_waste({"serve", "--model", tiny, "--alias", "x", "--port", "0"});
  CHECK(ran.rc == 1);
  CHECK(ran.err == "waste serve: --alias names the MODEL argument's model; with --model give PATH=ID\n");
  ran = test::run_waste({"serve", "--model", tiny, "--idle-unload", "-1", "--port", "0"});
  CHECK(ran.rc == 2);
  CHECK(ran.err.find("--idle-unload must be between 0 and 31536000") != std::string::npos);
}

TEST_CASE("serve budget: a model's footprint is its daemon's floor for every sequence", "[serve][models][budget]") {
  MemoryPlan plan;
  plan.trunk_bytes = 1000;
  plan.state_bytes = 100;
  plan.scratch_bytes = 50;
  plan.min_expert_cache_bytes = 70;  // 2 * top_k records; a slot is 30: 3 whole slots hold it (90)
  plan.max_record_bytes = 30;
  plan.working_set_bytes = 200;
  MemoryPlan daemon_plan;
  daemon_plan.floor_bytes = 1200;
  const ModelFootprint f = model_footprint(plan, daemon_plan, 4, 512);
  CHECK(f.floor_bytes == 1000 + 90 + 4 * 100 + 50);
  CHECK(f.working_set_bytes == 200);
  CHECK(f.whole_set_bytes == 0);   // no records in the plan: no whole set
  plan.expert_records = 10;        // every record in its own 30-byte slot beside trunk and clients
  CHECK(model_footprint(plan, daemon_plan, 4, 512).whole_set_bytes == 1000 + 10 * 30 + 4 * 100 + 50);
  // The decode head's copy is the client's too: in the floor and beside the whole set.
  CHECK(model_footprint(plan, daemon_plan, 4, 512, 7).floor_bytes == 1000 + 90 + 4 * 100 + 50 + 7);
  CHECK(model_footprint(plan, daemon_plan, 4, 512, 7).whole_set_bytes == 1000 + 10 * 30 + 4 * 100 + 50 + 7);
  daemon_plan.floor_bytes = 5000;  // a daemon refuses an explicit budget under its own floor
  CHECK(model_footprint(plan, daemon_plan, 4, 512).floor_bytes == 5000);
  CHECK(model_footprint(plan, daemon_plan, 4, 512).whole_set_bytes == 5000);
}

TEST_CASE("serve budget: equal shares, idle models unloaded least recently used first, else 507", "[serve][models][budget]") {
  const ModelFootprint need{1000, 100, 2, 512};
  const ServerBudget budget{4000, "--budget 4000"};
  SECTION("alone: the most working sets that fit its share") {
    auto d = decide_load("a", need, budget, 0, {}, 2);  // share 2000: floor + 3 ws
    REQUIRE(d);
    CHECK(d->budget_bytes == 1300);
    CHECK(d->unload.empty());
    d = decide_load("a", need, budget, 0, {}, 4);  // share 1000: the floor
    REQUIRE(d);
    CHECK(d->budget_bytes == 1000);
    d = decide_load("a", need, budget, 0, {{"b", 2850, false, 1}}, 2);  // 1150 left: floor + 1 ws
    REQUIRE(d);
    CHECK(d->budget_bytes == 1100);
  }
  SECTION("the whole expert set when it fits what is left and the share, else working sets") {
    const ModelFootprint whole{1000, 100, 2, 512, 1150};
    auto d = decide_load("a", whole, budget, 0, {}, 2);  // share 2000: the whole set, not floor + 3 ws
    REQUIRE(d);
    CHECK(d->budget_bytes == 1150);
    d = decide_load("a", whole, budget, 0, {{"b", 2851, false, 1}}, 2);  // 1149 left: floor + 1 ws
    REQUIRE(d);
    CHECK(d->budget_bytes == 1100);
  }
  SECTION("idle models make room, least recently used first") {
    const std::vector<BudgetHolder> held{{"b", 1500, true, 5}, {"c", 1500, true, 2}, {"d", 500, false, 1}};
    auto d = decide_load("a", need, budget, 0, held, 4);  // 500 left: 'c' (used before 'b') goes
    REQUIRE(d);
    CHECK(d->unload == std::vector<std::string>{"c"});
    CHECK(d->budget_bytes == 1000);
    d = decide_load("a", ModelFootprint{2400, 100, 2, 512}, budget, 0, held, 4);  // both idle ones
    REQUIRE(d);
    CHECK(d->unload == std::vector<std::string>{"c", "b"});
  }
  SECTION("what is in use stays: 507 naming the need, the budget, its source and the holders") {
    const std::vector<BudgetHolder> held{{"b", 2500, false, 5}, {"c", 1000, false, 2, "loading"}};
    auto d = decide_load("a", need, budget, 0, held, 3);
    REQUIRE_FALSE(d);
    CHECK(d.error().status == 507);
    CHECK(d.error().type == "server_error");
    CHECK(d.error().code == "insufficient_memory");
    CHECK(d.error().param == "model");
    CHECK(d.error().message ==
          "model 'a' does not fit the budget: it needs 1000 B (its memory plan's floor for 2 sequences at ctx 512), "
          "500 B of the budget 3.9 KB (--budget 4000) is left; 'b' holds 2.4 KB (in use), 'c' holds 1000 B (loading)");
    // Other daemons on the machine count against the machine cap.
    const ServerBudget cap{std::uint64_t(64) << 20, "the machine cap: 3/4 of usable RAM 85.3 MB"};
    d = decide_load("big", ModelFootprint{std::uint64_t(40) << 20, 0, 1, 4096}, cap, std::uint64_t(30) << 20, {}, 1);
    REQUIRE_FALSE(d);
    CHECK(d.error().message ==
          "model 'big' does not fit the budget: it needs 40.0 MB (its memory plan's floor for 1 sequence at ctx 4096), "
          "34.0 MB of the budget 64.0 MB (the machine cap: 3/4 of usable RAM 85.3 MB) is left; other waste-ioserver "
          "daemons hold 30.0 MB");
  }
  CHECK(insufficient_memory("a", "no room").message == "model 'a' could not load: no room");
  CHECK(insufficient_memory("a", "no room").status == 507);
}

TEST_CASE("ModelSet: loads on first use, routes to each model's scheduler, 404 for an unknown id", "[serve][models]") {
  const fs::path tiny = test::tokenizer_container();
  const fs::path other = other_container();
  LoaderLog log;
  ModelSet set({{{tiny, "tiny"}, {}}, {{other, "other"}, {}}}, {}, test_loader(log));
  CHECK(set.state("tiny") == ModelState::unloaded);
  CHECK(set.state("other") == ModelState::unloaded);
  CHECK(log.loads == 0);  // nothing at start

  const ApiError unknown = std::get<ApiError>(set.acquire("nope"));
  CHECK(unknown.status == 404);
  CHECK(unknown.code == "model_not_found");
  CHECK(unknown.param == "model");
  CHECK(unknown.message == "model 'nope' does not exist; this server serves 'tiny', 'other'");
  CHECK(std::get<ModelSet::Waiter>(set.acquire("tiny", /*start_load=*/false)).id().empty());  // a probe loads nothing

  const GenerationJob job = greedy_job(3);
  auto got = wait_and_claim(set, set.acquire("tiny"));
  REQUIRE(std::holds_alternative<ModelSet::Place>(got));
  CHECK(set.state("tiny") == ModelState::loaded);
  CHECK(set.state("other") == ModelState::unloaded);
  auto& place = std::get<ModelSet::Place>(got);
  const std::vector<int> from_tiny = run(*place.model.scheduler, job, std::move(place.ticket));
  got = wait_and_claim(set, set.acquire("other"));
  REQUIRE(std::holds_alternative<ModelSet::Place>(got));
  auto& other_place = std::get<ModelSet::Place>(got);
  const std::vector<int> from_other = run(*other_place.model.scheduler, job, std::move(other_place.ticket));
  CHECK(from_tiny == alone(tiny, job));
  CHECK(from_other == alone(other, job));
  CHECK(from_tiny != from_other);  // the two models differ, so the routing is seen
  CHECK(log.loads == 2);
  CHECK(log.budgets == std::vector<std::uint64_t>{0, 0});  // no budget: the command's options apply
  CHECK(set.in_flight() == 0);
  set.stop();
}

TEST_CASE("ModelSet: an idle model unloads after --idle-unload, never while a request holds a place", "[serve][models]") {
  LoaderLog log;
  ModelSetOptions options;
  options.idle_unload = 300ms;
  options.tick = 20ms;
  ModelSet set({{{test::tokenizer_container(), "tiny"}, {}}}, options, test_loader(log));
  auto got = wait_and_claim(set, set.acquire("tiny"));
  REQUIRE(std::holds_alternative<ModelSet::Place>(got));
  {
    auto held = std::move(std::get<ModelSet::Place>(got));
    std::this_thread::sleep_for(900ms);  // three idle periods with a place taken
    CHECK(set.state("tiny") == ModelState::loaded);
    CHECK(log.unloads == 0);
  }  // the place is given back unused
  const auto released = std::chrono::steady_clock::now();
  REQUIRE(wait_for_state(set, "tiny", ModelState::unloaded, 5s));
  CHECK(std::chrono::steady_clock::now() - released >= 250ms);  // not before the idle period (one tick's slack)
  CHECK(log.unloads == 1);
  set.visit([](const ModelView& m) {
    CHECK(m.counters.idle_unloads == 1);
    CHECK(m.scheduler == nullptr);
  });
  // The next request loads it again.
  got = wait_and_claim(set, set.acquire("tiny"));
  REQUIRE(std::holds_alternative<ModelSet::Place>(got));
  CHECK(log.loads == 2);
  std::get<ModelSet::Place>(got).ticket = Admission();
  set.stop();
}

TEST_CASE("ModelSet: 507 before loading, an idle model unloaded for room, a failed load loses nothing",
          "[serve][models][budget]") {
  const fs::path tiny = test::tokenizer_container();
  LoaderLog log;
  ModelSetOptions options;
  options.budget = ServerBudget{1500, "--budget 1500"};
  const ModelFootprint footprint{1000, 100, 2, kCtx};
  ModelSet set({{{tiny, "a"}, footprint}, {{other_container(), "b"}, footprint}}, options, test_loader(log));
  auto a = wait_and_claim(set, set.acquire("a"));
  REQUIRE(std::holds_alternative<ModelSet::Place>(a));
  std::get<ModelSet::Place>(a).ticket = Admission();  // 'a' idle now
  // 'b' needs 1000 and 500 are left: 'a' is unloaded for it.
  auto b = wait_and_claim(set, set.acquire("b"));
  REQUIRE(std::holds_alternative<ModelSet::Place>(b));
  CHECK(set.state("a") == ModelState::unloaded);
  CHECK(set.state("b") == ModelState::loaded);
  CHECK(log.unloads == 1);
  CHECK(log.budgets == std::vector<std::uint64_t>{1000, 1000});  // share 750: the floor
  // 'b' holds a place: 'a' does not fit, and 'b' goes on serving.
  auto refused = wait_and_claim(set, set.acquire("a"));
  REQUIRE(std::holds_alternative<ApiError>(refused));
  CHECK(std::get<ApiError>(refused).status == 507);
  CHECK(std::get<ApiError>(refused).message ==
        "model 'a' does not fit the budget: it needs 1000 B (its memory plan's floor for 2 sequences at ctx 256), "
        "500 B of the budget 1.5 KB (--budget 1500) is left; 'b' holds 1000 B (in use)");
  CHECK(set.state("a") == ModelState::unloaded);
  CHECK(set.state("b") == ModelState::loaded);
  auto& place = std::get<ModelSet::Place>(b);
  const GenerationJob job = greedy_job(11);
  CHECK(run(*place.model.scheduler, job, std::move(place.ticket)) == alone(other_container(), job));
  set.visit([](const ModelView& m) {
    if (m.id == "a") {
      CHECK(m.counters.refusals == 1);
      CHECK(m.counters.room_unloads == 1);
      CHECK(m.budget_bytes == 0);
    } else {
      CHECK(m.budget_bytes == 1000);
    }
  });
  set.stop();
}

TEST_CASE("HttpServer with several models: each request answered by the model it names", "[serve][models][http]") {
  const fs::path tiny = test::tokenizer_container();
  const fs::path other = other_container();
  const auto completion = [](const std::string& model) {
    return json{{"model", model}, {"prompt", json::array({5, 22, 39, 56, 73, 90})}, {"max_tokens", 8}, {"temperature", 0}}
        .dump();
  };
  // The answers of a server of each model alone (the single-model path).
  const auto single = [&](const fs::path& container, const std::string& id) {
    LoaderLog log;
    ModelSet set({{{container, id}, {}}}, {}, test_loader(log));
    REQUIRE(set.load_now(id));
    Metrics metrics;
    ServeConfig config;
    config.port = 0;
    config.model_id = id;
    HttpServer server(config, metrics);
    REQUIRE(server.start());
    server.ready(set);
    const http_test::HttpAnswer answer = http_test::post(server.port(), "/v1/completions", completion(id));
    REQUIRE(answer.status == 200);
    server.stop();
    set.stop();
    return json::parse(answer.body)["choices"][0]["text"].get<std::string>();
  };
  const std::string tiny_alone = single(tiny, "tiny");
  const std::string other_alone = single(other, "other");
  REQUIRE(tiny_alone != other_alone);

  LoaderLog log;
  ModelSet set({{{tiny, "tiny"}, {}}, {{other, "other"}, {}}}, {}, test_loader(log));
  Metrics metrics;
  ServeConfig config;
  config.port = 0;
  config.several_models = true;
  HttpServer server(config, metrics);
  REQUIRE(server.start());
  server.ready(set);
  const auto models = [&] {
    http_test::RawSocket s(server.port());
    REQUIRE(s.send_all("GET /v1/models HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"));
    const auto answer = http_test::parse_answer(s.read_all(10s));
    INFO(answer.head << answer.body);
    REQUIRE(answer.status == 200);
    json statuses = json::object();
    const json doc = json::parse(answer.body);
    for (const json& m : doc["data"]) statuses[m["id"].get<std::string>()] = m["status"];
    return statuses;
  };
  CHECK(models() == json{{"tiny", "unloaded"}, {"other", "unloaded"}});
  std::string from_other, from_tiny;
  std::thread first([&] {
    const auto answer = http_test::post(server.port(), "/v1/completions", completion("other"));
    if (answer.status == 200) from_other = json::parse(answer.body)["choices"][0]["text"].get<std::string>();
  });
  const auto answer = http_test::post(server.port(), "/v1/completions", completion("tiny"));
  first.join();
  REQUIRE(answer.status == 200);
  from_tiny = json::parse(answer.body)["choices"][0]["text"].get<std::string>();
  CHECK(json::parse(answer.body)["model"] == "tiny");
  CHECK(from_tiny == tiny_alone);
  CHECK(from_other == other_alone);
  CHECK(models() == json{{"tiny", "loaded"}, {"other", "loaded"}});
  const auto unknown = http_test::post(server.port(), "/v1/completions", completion("nope"));
  CHECK(unknown.status == 404);
  CHECK(unknown.body == R"({"error":{"code":"model_not_found","message":"model 'nope' does not exist; this server )"
                        R"(serves 'tiny', 'other'","param":"model","type":"invalid_request_error"}})");
  const std::string exposition = metrics.render(&set, true);
  CHECK(exposition.find("waste_generated_tokens_total{model=\"tiny\"} 8\n") != std::string::npos);
  CHECK(exposition.find("waste_generated_tokens_total{model=\"other\"} 8\n") != std::string::npos);
  CHECK(exposition.find("waste_model_state{model=\"other\",state=\"loaded\"} 1\n") != std::string::npos);
  CHECK(exposition.find("waste_model_loads_total{model=\"tiny\",result=\"loaded\"} 1\n") != std::string::npos);
  server.stop();
  set.stop();
}

}  // namespace waste::serve
