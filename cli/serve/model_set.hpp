// The models one `waste serve` serves (docs/design/serve.md, Several models): each an id, a
// container and a state (unloaded, loading, loaded, unloading). A model is loaded on a request
// that names it (or at start, for the positional MODEL form), on the set's own loader thread, one
// load at a time: first the budget decision (model_budget.hpp: 507 before anything is opened;
// idle models unloaded for room, least recently used first), then the caller's loader (engine
// through its container's waste-ioserver, tokenizer, chat format, scheduler). A loaded model
// that has had nothing in flight for `idle_unload` is unloaded by the same thread: its scheduler
// stopped, its engine closed (the daemon lease given back), its prefix cache dropped.
//
// A request takes a place on a loaded model's scheduler under the set's lock (acquire), so a
// model with a place taken is never unloaded: in_flight() of its scheduler counts the place until
// its request ends. Requests that name a model being loaded wait (a Waiter) without holding a
// thread; their count keeps the model from being unloaded before they claim their place.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <variant>
#include <vector>

#include "cli/serve/api_error.hpp"
#include "cli/serve/generation_route.hpp"
#include "cli/serve/model_budget.hpp"
#include "cli/serve/model_spec.hpp"
#include "cli/serve/scheduler.hpp"
#include "shared/result.hpp"

namespace waste::serve {

enum class ModelState : std::uint8_t { unloaded, loading, loaded, unloading };
// "unloaded", "loading", "loaded", "unloading" (/v1/models' "status").
const char* state_name(ModelState state);

// What a loaded model holds. Destroying it unloads the model: the loader's subclass stops the
// scheduler first, then closes the engine. `serve` points into it; `serve.hold` keeps alive what
// a reply still reads after its request ended (the chat format).
struct LoadedModel {
  virtual ~LoadedModel() = default;
  ServeModel serve;
  std::string summary;  // for the log: "parallel 4, ctx 512, chat template, prefix cache 8.0 MB"
};

// Opens a model with a daemon budget of `budget_bytes` (0: as the command's options say). Errors
// with Errc::ram_budget become 507s, others 500s.
using ModelLoader = std::function<Result<std::unique_ptr<LoadedModel>>(const ModelSpec& spec, std::uint64_t budget_bytes)>;

struct ModelConfig {
  ModelSpec spec;
  ModelFootprint footprint;  // unused without a budget
};

struct ModelSetOptions {
  // The budget the models share; nullopt: no decision before a load (the positional MODEL form,
  // whose --budget is its daemon's, as it always was).
  std::optional<ServerBudget> budget;
  // What other waste-ioserver daemons hold (the machine ledger; only with the machine cap).
  std::function<std::uint64_t()> others_bytes;
  std::chrono::milliseconds idle_unload{0};     // 0 = never
  std::chrono::milliseconds tick{200};          // how often the loader thread looks for idle models
  std::function<void(const std::string& line)> log;  // one line per load, unload, refusal (stderr)
};

// Counters for /metrics (per model; the set's lock guards them).
struct ModelCounters {
  std::uint64_t loads = 0, load_failures = 0, refusals = 0;  // refusals: 507 from the decision
  std::uint64_t idle_unloads = 0, room_unloads = 0;
};

// One model as /v1/models and /metrics see it (read under the set's lock).
struct ModelView {
  const std::string& id;
  ModelState state;
  std::uint64_t budget_bytes;    // what it holds of the budget (0 unless loading or loaded)
  const Scheduler* scheduler;    // set while loaded
  const ModelCounters& counters;
};

class ModelSet {
  struct Entry;
  struct Pending;

 public:
  ModelSet(std::vector<ModelConfig> models, ModelSetOptions options, ModelLoader loader);
  ~ModelSet();  // stop(), then every model unloaded (destroy after the HTTP server stopped)
  ModelSet(const ModelSet&) = delete;
  ModelSet& operator=(const ModelSet&) = delete;

  // A request's wait for a model being loaded. Move-only; dropped unclaimed, it stops counting.
  class Waiter {
   public:
    Waiter() = default;
    Waiter(Waiter&& other) noexcept;
    Waiter& operator=(Waiter&& other) noexcept;
    ~Waiter();
    [[nodiscard]] bool done() const;  // the load finished (loaded or failed); never blocks
    [[nodiscard]] const std::string& id() const { return id_; }

   private:
    friend class ModelSet;
    void release();
    ModelSet* set_ = nullptr;
    std::string id_;
    std::shared_ptr<Pending> pending_;
  };

  // A place on a loaded model's scheduler.
  struct Place {
    ServeModel model;
    Admission ticket;
  };
  using Acquired = std::variant<Place, Waiter, ApiError>;

  // A place on model `id`: a Place when it is loaded (429 when its queue is full), a Waiter while
  // it loads (a load is started when none is under way and `start_load`), or an error: 404
  // model_not_found for an unknown id, 503 while draining. Without `start_load`, a model that is
  // not loaded gives an empty Waiter (id() ""): no load started (a fast path's probe).
  Acquired acquire(const std::string& id, bool start_load = true);
  // The place a waiter waited for, once done(): a Place, or the load's error (507, 500), or a
  // new Waiter when the model was unloaded again before the claim.
  Acquired claim(Waiter waiter);

  // Loads `id` now, on this thread, without a budget decision (the positional form at start).
  Status load_now(const std::string& id);

  [[nodiscard]] const std::vector<std::string>& ids() const { return ids_; }
  [[nodiscard]] bool contains(const std::string& id) const;
  // The 404 for a model this server does not serve: "model 'x' does not exist; this server serves
  // 'a'" (one model, the words a single-model server always used) or "... serves 'a', 'b'".
  [[nodiscard]] ApiError unknown_model(const std::string& id) const;
  // Calls `fn` for every model in order, under the set's lock (keep it short; no calls back).
  void visit(const std::function<void(const ModelView&)>& fn) const;
  // Calls `fn` once with every model, in order, under the set's lock.
  void visit_all(const std::function<void(const std::vector<ModelView>&)>& fn) const;
  [[nodiscard]] ModelState state(const std::string& id) const;
  // A loaded model's LoadedModel::summary ("" when it is not loaded).
  [[nodiscard]] std::string summary(const std::string& id) const;
  [[nodiscard]] const ModelSetOptions& options() const { return options_; }

  void drain();                     // refuse new places and loads (503); the schedulers drain
  [[nodiscard]] int in_flight() const;  // requests in flight or waiting for a load, every model
  void stop();    // refuse new places, fail loads not started (503), join the loader thread
  void cancel();  // stop every loaded model's scheduler (cancels what is left; the drain deadline)

 private:
  Acquired acquire_locked(Entry& entry, bool start_load);  // under the lock
  void loader_loop();
  void load_one(std::unique_lock<std::mutex>& lock, Entry& entry);
  void unload_idle(std::unique_lock<std::mutex>& lock);
  // Destroys `models` with the lock released, then marks their entries unloaded.
  void unload(std::unique_lock<std::mutex>& lock, std::vector<std::pair<Entry*, std::unique_ptr<LoadedModel>>> models);
  [[nodiscard]] bool idle(const Entry& entry) const;  // under the lock
  Entry* find(const std::string& id) const;
  void log(const std::string& line) const;
  void fail_queued();  // under the lock

  ModelSetOptions options_;
  ModelLoader loader_;
  std::vector<std::unique_ptr<Entry>> entries_;
  std::vector<std::string> ids_;
  std::uint64_t clock_ = 0;  // use order (the lock guards it)

  mutable std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<Entry*> queue_;  // loads to run, in request order
  bool draining_ = false;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace waste::serve
