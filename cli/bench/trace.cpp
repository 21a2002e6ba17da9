#include "cli/bench/trace.hpp"

#include <charconv>
#include <sstream>

namespace waste::cli::bench {

std::string format_trace(const std::vector<TraceEvent>& events) {
  std::string out(kTraceHeader);
  out += '\n';
  for (const auto& e : events) {
    out += e.prefetch ? 'p' : 'd';
    out += ' ' + std::to_string(e.step) + ' ' + std::to_string(e.layer) + ' ';
    for (std::size_t i = 0; i < e.experts.size(); ++i) {
      if (i) out += ',';
      out += std::to_string(e.experts[i]);
    }
    out += '\n';
  }
  return out;
}

namespace {
bool parse_int(std::string_view s, int& v) {
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  return ec == std::errc() && p == s.data() + s.size() && v >= 0;
}
}  // namespace

Result<std::vector<TraceEvent>> parse_trace(std::string_view text) {
  std::vector<TraceEvent> events;
  std::istringstream in{std::string(text)};
  int line_no = 0;
  for (std::string line; std::getline(in, line);) {
    ++line_no;
    if (line.empty() || line[0] == '#') continue;
    auto bad = [&](const std::string& why) {
      return make_error(Errc::format, "trace line " + std::to_string(line_no) + ": " + why);
    };
    std::istringstream fields(line);
    std::string kind, step, layer, ids, extra;
    if (!(fields >> kind >> step >> layer >> ids) || (fields >> extra)) return bad("expected KIND STEP LAYER IDS");
    TraceEvent e;
    if (kind != "d" && kind != "p") return bad("kind '" + kind + "' is not d or p");
    e.prefetch = kind == "p";
    if (!parse_int(step, e.step)) return bad("step '" + step + "' is not a non-negative integer");
    if (!parse_int(layer, e.layer)) return bad("layer '" + layer + "' is not a non-negative integer");
    std::string_view rest = ids;
    while (!rest.empty()) {
      const auto comma = rest.find(',');
      const std::string_view piece = rest.substr(0, comma);
      int id = 0;
      if (!parse_int(piece, id)) return bad("expert id '" + std::string(piece) + "' is not a non-negative integer");
      e.experts.push_back(id);
      rest = comma == std::string_view::npos ? std::string_view{} : rest.substr(comma + 1);
    }
    events.push_back(std::move(e));
  }
  return events;
}

bool is_routing_trace(std::string_view text) {
  const auto first = text.find_first_not_of(" \t\r\n");
  return first != std::string_view::npos && text[first] == '{';
}

Result<std::vector<TraceEvent>> routing_trace_events(const RoutingTrace& trace, const Manifest& manifest) {
  std::vector<int> layers;  // the container's MoE layers, ascending (std::map order)
  for (const auto& [layer, bank] : manifest.banks) layers.push_back(layer);
  if (std::size_t(trace.n_layers) != layers.size()) {
    return make_error(Errc::argument, "routing trace has " + std::to_string(trace.n_layers) +
                                          " MoE layers but the container has " + std::to_string(layers.size()) +
                                          " expert banks");
  }
  std::vector<TraceEvent> events;
  for (std::size_t t = 0; t < trace.tokens.size(); ++t) {
    for (std::size_t i = 0; i < trace.tokens[t].size(); ++i) {
      const int layer = layers[i];
      const int experts = manifest.banks.at(layer).experts;
      for (int id : trace.tokens[t][i]) {
        if (id >= experts) {
          return make_error(Errc::argument, "routing trace token " + std::to_string(t) + " MoE layer " +
                                                std::to_string(i) + ": expert " + std::to_string(id) +
                                                " is beyond layer " + std::to_string(layer) + "'s " +
                                                std::to_string(experts) + " experts");
        }
      }
      events.push_back(TraceEvent{false, int(t), layer, trace.tokens[t][i]});
    }
  }
  return events;
}

TracingExpertSource::TracingExpertSource(std::unique_ptr<ExpertSource> inner,
                                         std::shared_ptr<std::vector<TraceEvent>> sink)
    : inner_(std::move(inner)), sink_(std::move(sink)) {}

Status TracingExpertSource::request(int layer, std::span<const int> experts) {
  // Strictly lower: a prefill window may ask one layer in several requests (same step).
  if (layer < last_layer_) ++step_;
  last_layer_ = layer;
  sink_->push_back(TraceEvent{false, step_, layer, {experts.begin(), experts.end()}});
  // request_layer, not request: the inner source's acquire_next needs the id list too.
  return inner_->request_layer(layer, experts);
}

Result<ExpertView> TracingExpertSource::acquire(int layer, int expert) { return inner_->acquire(layer, expert); }
Result<ReadyExpert> TracingExpertSource::acquire_next(int layer) { return inner_->acquire_next(layer); }
void TracingExpertSource::release_layer(int layer) { inner_->release_layer(layer); }

void TracingExpertSource::prefetch(int layer, std::span<const int> experts) {
  sink_->push_back(TraceEvent{true, std::max(step_, 0), layer, {experts.begin(), experts.end()}});
  inner_->prefetch(layer, experts);
}

ExpertSourceStats TracingExpertSource::stats() const { return inner_->stats(); }
bool TracingExpertSource::direct_io() const { return inner_->direct_io(); }
std::uint64_t TracingExpertSource::cache_capacity_records() const { return inner_->cache_capacity_records(); }

}  // namespace waste::cli::bench
