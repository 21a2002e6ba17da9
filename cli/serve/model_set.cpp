#include "cli/serve/model_set.hpp"

#include <atomic>
#include <cstdio>
#include <utility>

#include "shared/memory/budget.hpp"

namespace waste::serve {
namespace {

using Clock = std::chrono::steady_clock;

ApiError shutting_down() {
  return ApiError{503, "the server is shutting down", "service_unavailable_error", "", ""};
}

std::string seconds_text(Clock::duration d) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f s", std::chrono::duration<double>(d).count());
  return text;
}

}  // namespace

const char* state_name(ModelState state) {
  switch (state) {
    case ModelState::unloaded: return "unloaded";
    case ModelState::loading: return "loading";
    case ModelState::loaded: return "loaded";
    case ModelState::unloading: return "unloading";
  }
  return "unloaded";
}

// A load queued or under way; every Waiter of it reads the outcome.
struct ModelSet::Pending {
  std::atomic<bool> done{false};
  std::optional<ApiError> error;  // written before done is set
};

struct ModelSet::Entry {
  ModelConfig config;
  ModelState state = ModelState::unloaded;
  std::unique_ptr<LoadedModel> model;
  std::uint64_t budget_bytes = 0;   // its share of the budget while loading or loaded
  std::shared_ptr<Pending> pending; // a load queued or under way
  int waiting = 0;                  // Waiters not claimed yet
  std::uint64_t last_used = 0;      // ModelSet::clock_ at its last place taken or load
  Clock::time_point active_at{};    // when it was last seen with something in flight
  ModelCounters counters;
};

ModelSet::ModelSet(std::vector<ModelConfig> models, ModelSetOptions options, ModelLoader loader)
    : options_(std::move(options)), loader_(std::move(loader)) {
  for (ModelConfig& config : models) {
    ids_.push_back(config.spec.id);
    auto entry = std::make_unique<Entry>();
    entry->config = std::move(config);
    entries_.push_back(std::move(entry));
  }
  thread_ = std::thread([this] { loader_loop(); });
}

ModelSet::~ModelSet() {
  stop();
  for (auto& entry : entries_) entry->model.reset();  // each model's own teardown (scheduler, then engine)
}

// --- Waiter ---

ModelSet::Waiter::Waiter(Waiter&& other) noexcept
    : set_(std::exchange(other.set_, nullptr)), id_(std::move(other.id_)), pending_(std::move(other.pending_)) {}

ModelSet::Waiter& ModelSet::Waiter::operator=(Waiter&& other) noexcept {
  if (this != &other) {
    release();
    set_ = std::exchange(other.set_, nullptr);
    id_ = std::move(other.id_);
    pending_ = std::move(other.pending_);
  }
  return *this;
}

ModelSet::Waiter::~Waiter() { release(); }

bool ModelSet::Waiter::done() const { return !pending_ || pending_->done.load(std::memory_order_acquire); }

void ModelSet::Waiter::release() {
  ModelSet* set = std::exchange(set_, nullptr);
  if (!set) return;
  std::lock_guard lock(set->mutex_);
  if (Entry* entry = set->find(id_)) --entry->waiting;
}

// --- places ---

ModelSet::Entry* ModelSet::find(const std::string& id) const {
  for (const auto& entry : entries_) {
    if (entry->config.spec.id == id) return entry.get();
  }
  return nullptr;
}

bool ModelSet::contains(const std::string& id) const { return find(id) != nullptr; }

ApiError ModelSet::unknown_model(const std::string& id) const {
  std::string served;
  for (const std::string& known : ids_) served += (served.empty() ? "'" : ", '") + known + "'";
  return ApiError{404, "model '" + id + "' does not exist; this server serves " + served, "invalid_request_error",
                  "model", "model_not_found"};
}

ModelSet::Acquired ModelSet::acquire(const std::string& id, bool start_load) {
  Entry* entry = find(id);
  if (!entry) return unknown_model(id);
  std::lock_guard lock(mutex_);
  return acquire_locked(*entry, start_load);
}

ModelSet::Acquired ModelSet::acquire_locked(Entry& entry, bool start_load) {
  if (draining_ || stopping_) return shutting_down();
  if (entry.state == ModelState::loaded) {
    auto ticket = entry.model->serve.scheduler->reserve();
    if (!ticket) return ticket.error();
    entry.last_used = ++clock_;
    entry.active_at = Clock::now();
    return Place{entry.model->serve, std::move(*ticket)};
  }
  if (!start_load) return Waiter();  // not loaded: nothing started, nothing counted
  if (!entry.pending) {
    entry.pending = std::make_shared<Pending>();
    queue_.push_back(&entry);
    wake_.notify_one();
  }
  ++entry.waiting;
  Waiter waiter;
  waiter.set_ = this;
  waiter.id_ = entry.config.spec.id;
  waiter.pending_ = entry.pending;
  return waiter;
}

ModelSet::Acquired ModelSet::claim(Waiter waiter) {
  Entry* entry = find(waiter.id_);
  if (!entry || !waiter.set_) return shutting_down();
  std::lock_guard lock(mutex_);
  --entry->waiting;
  waiter.set_ = nullptr;  // counted off here; the place is taken under the same lock
  if (waiter.pending_ && waiter.pending_->error) return *waiter.pending_->error;
  return acquire_locked(*entry, /*start_load=*/true);
}

Status ModelSet::load_now(const std::string& id) {
  Entry* entry = find(id);
  if (!entry) return make_error(Errc::argument, "no model '" + id + "'");
  {
    std::lock_guard lock(mutex_);
    if (entry->state == ModelState::loaded) return ok();
    entry->state = ModelState::loading;
  }
  auto loaded = loader_(entry->config.spec, 0);
  std::lock_guard lock(mutex_);
  if (!loaded) {
    entry->state = ModelState::unloaded;
    ++entry->counters.load_failures;
    return std::unexpected(loaded.error());
  }
  entry->model = std::move(*loaded);
  entry->state = ModelState::loaded;
  entry->last_used = ++clock_;
  entry->active_at = Clock::now();
  ++entry->counters.loads;
  return ok();
}

// --- the loader thread ---

void ModelSet::loader_loop() {
  std::unique_lock lock(mutex_);
  while (!stopping_) {
    if (!queue_.empty()) {
      Entry* entry = queue_.front();
      queue_.pop_front();
      load_one(lock, *entry);
      continue;
    }
    unload_idle(lock);
    const auto woken = [&] { return stopping_ || !queue_.empty(); };
    if (options_.idle_unload.count() > 0) {
      wake_.wait_for(lock, options_.tick, woken);
    } else {
      wake_.wait(lock, woken);  // nothing to look for between loads
    }
  }
}

bool ModelSet::idle(const Entry& entry) const {
  return entry.state == ModelState::loaded && entry.waiting == 0 && !entry.pending &&
         entry.model->serve.scheduler->in_flight() == 0;
}

void ModelSet::load_one(std::unique_lock<std::mutex>& lock, Entry& entry) {
  std::shared_ptr<Pending> pending = entry.pending;
  const std::string& id = entry.config.spec.id;
  const auto finish = [&](std::optional<ApiError> error) {
    if (pending) {
      pending->error = std::move(error);
      pending->done.store(true, std::memory_order_release);
    }
    entry.pending.reset();
  };
  if (entry.state == ModelState::loaded) return finish(std::nullopt);
  std::uint64_t budget_bytes = 0;
  std::vector<std::pair<Entry*, std::unique_ptr<LoadedModel>>> room;
  if (options_.budget) {
    std::uint64_t others = 0;
    if (options_.others_bytes) {
      lock.unlock();  // a file read under its own lock
      others = options_.others_bytes();
      lock.lock();
    }
    std::vector<BudgetHolder> held;
    for (const auto& other : entries_) {
      if (other.get() == &entry || other->state != ModelState::loaded) continue;
      held.push_back({other->config.spec.id, other->budget_bytes, idle(*other), other->last_used, "in use"});
    }
    auto decision = decide_load(id, entry.config.footprint, *options_.budget, others, std::move(held), entries_.size());
    if (!decision) {
      ++entry.counters.refusals;
      log("waste serve: " + decision.error().message + " (507)");
      return finish(decision.error());
    }
    for (const std::string& victim_id : decision->unload) {
      Entry* victim = find(victim_id);
      victim->state = ModelState::unloading;
      ++victim->counters.room_unloads;
      log("waste serve: model '" + victim_id + "' unloaded to make room for '" + id + "'");
      room.emplace_back(victim, std::move(victim->model));
    }
    budget_bytes = decision->budget_bytes;
  }
  entry.state = ModelState::loading;
  entry.budget_bytes = budget_bytes;
  unload(lock, std::move(room));
  const ModelSpec spec = entry.config.spec;
  lock.unlock();
  const auto start = Clock::now();
  auto loaded = loader_(spec, budget_bytes);
  const auto took = Clock::now() - start;
  lock.lock();
  if (!loaded) {
    entry.state = ModelState::unloaded;
    entry.budget_bytes = 0;
    ++entry.counters.load_failures;
    log("waste serve: model '" + id + "' failed to load: " + loaded.error().message);
    return finish(loaded.error().code == Errc::ram_budget
                      ? insufficient_memory(id, loaded.error().message)
                      : ApiError{500, "model '" + id + "' could not load: " + loaded.error().message, "server_error",
                                 "model", ""});
  }
  entry.model = std::move(*loaded);
  entry.state = ModelState::loaded;
  entry.last_used = ++clock_;
  entry.active_at = Clock::now();
  ++entry.counters.loads;
  log("waste serve: model '" + id + "' loaded in " + seconds_text(took) + " (" +
      (budget_bytes ? "budget " + format_bytes(budget_bytes) + ", " : std::string()) + entry.model->summary + ")");
  finish(std::nullopt);
}

void ModelSet::unload_idle(std::unique_lock<std::mutex>& lock) {
  if (options_.idle_unload.count() <= 0) return;
  const auto now = Clock::now();
  std::vector<std::pair<Entry*, std::unique_ptr<LoadedModel>>> gone;
  for (const auto& entry : entries_) {
    if (entry->state != ModelState::loaded) continue;
    if (!idle(*entry)) {
      entry->active_at = now;
      continue;
    }
    if (now - entry->active_at < options_.idle_unload) continue;
    entry->state = ModelState::unloading;
    ++entry->counters.idle_unloads;
    log("waste serve: model '" + entry->config.spec.id + "' unloaded after " + seconds_text(now - entry->active_at) +
        " without requests");
    gone.emplace_back(entry.get(), std::move(entry->model));
  }
  unload(lock, std::move(gone));
}

void ModelSet::unload(std::unique_lock<std::mutex>& lock,
                      std::vector<std::pair<Entry*, std::unique_ptr<LoadedModel>>> models) {
  if (models.empty()) return;
  lock.unlock();
  for (auto& [entry, model] : models) model.reset();  // scheduler stopped, engine and daemon lease closed
  lock.lock();
  for (auto& [entry, model] : models) {
    entry->state = ModelState::unloaded;
    entry->budget_bytes = 0;
  }
}

void ModelSet::log(const std::string& line) const {
  if (options_.log) options_.log(line);
}

// --- views and shutdown ---

void ModelSet::visit_all(const std::function<void(const std::vector<ModelView>&)>& fn) const {
  std::lock_guard lock(mutex_);
  std::vector<ModelView> views;
  views.reserve(entries_.size());
  for (const auto& entry : entries_) {
    // A load that is queued reads as loading.
    const ModelState shown =
        entry->state == ModelState::unloaded && entry->pending ? ModelState::loading : entry->state;
    const Scheduler* scheduler = entry->state == ModelState::loaded ? entry->model->serve.scheduler : nullptr;
    views.push_back(ModelView{entry->config.spec.id, shown, entry->budget_bytes, scheduler, entry->counters});
  }
  fn(views);
}

void ModelSet::visit(const std::function<void(const ModelView&)>& fn) const {
  visit_all([&](const std::vector<ModelView>& views) {
    for (const ModelView& view : views) fn(view);
  });
}

ModelState ModelSet::state(const std::string& id) const {
  ModelState out = ModelState::unloaded;
  visit([&](const ModelView& view) {
    if (view.id == id) out = view.state;
  });
  return out;
}

std::string ModelSet::summary(const std::string& id) const {
  std::lock_guard lock(mutex_);
  const Entry* entry = find(id);
  return entry && entry->state == ModelState::loaded ? entry->model->summary : std::string();
}

void ModelSet::fail_queued() {
  for (Entry* entry : queue_) {  // loads not started: their waiters get 503
    if (entry->pending) {
      entry->pending->error = shutting_down();
      entry->pending->done.store(true, std::memory_order_release);
      entry->pending.reset();
    }
  }
  queue_.clear();
}

void ModelSet::drain() {
  std::lock_guard lock(mutex_);
  draining_ = true;
  fail_queued();
  for (const auto& entry : entries_) {
    if (entry->state == ModelState::loaded) entry->model->serve.scheduler->drain();
  }
}

int ModelSet::in_flight() const {
  std::lock_guard lock(mutex_);
  int total = 0;
  for (const auto& entry : entries_) {
    total += entry->waiting;
    if (entry->state == ModelState::loaded) total += entry->model->serve.scheduler->in_flight();
  }
  return total;
}

void ModelSet::stop() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
    draining_ = true;
    fail_queued();
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void ModelSet::cancel() {
  std::lock_guard lock(mutex_);
  for (const auto& entry : entries_) {
    if (entry->state == ModelState::loaded) entry->model->serve.scheduler->stop();  // cancels what is left
  }
}

}  // namespace waste::serve
