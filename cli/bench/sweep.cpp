#include "cli/bench/sweep.hpp"

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include <chrono>
#include <thread>

#include "cli/bench/child_process.hpp"
#include "shared/ipc/control_client.hpp"
#include "shared/ipc/ioserver_launch.hpp"
#include "shared/memory/budget.hpp"

namespace waste::cli::bench {
namespace {

double phase_value(const nlohmann::json& report, const char* phase, const char* key) {
  return report.contains(phase) ? report[phase].value(key, 0.0) : 0.0;
}

double hit_percent(const nlohmann::json& report, const char* phase) {
  const double hit = phase_value(report, phase, "experts_hit"), miss = phase_value(report, phase, "experts_missed");
  return hit + miss > 0 ? 100.0 * hit / (hit + miss) : 0.0;
}

// An auto-exit daemon (started by the child) serving the container: wait (bounded) until it is
// gone. A daemon started by hand stays, and its budget applies to every point, as before.
void wait_auto_daemon_gone(const std::string& model) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (std::chrono::steady_clock::now() < deadline) {
    const auto found = ipc::find_daemon_for_model(model);
    if (!found) return;
    auto client = ipc::ControlClient::connect(found->socket);
    auto pong = client ? client->ping() : Result<nlohmann::json>(std::unexpected(client.error()));
    if (pong && !pong->value("auto_exit", false)) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

}  // namespace

Result<std::vector<std::string>> parse_budget_list(const std::string& text) {
  std::vector<std::string> out;
  std::string_view rest = text;
  while (!rest.empty()) {
    const auto comma = rest.find(',');
    const std::string piece(rest.substr(0, comma));
    auto bytes = parse_bytes(piece);
    if (!bytes) return make_error(Errc::argument, "--sweep: '" + piece + "' is not a byte size (e.g. 500M, 2G)");
    out.push_back(piece);
    rest = comma == std::string_view::npos ? std::string_view{} : rest.substr(comma + 1);
  }
  if (out.empty()) return make_error(Errc::argument, "--sweep needs at least one budget");
  return out;
}

Result<std::vector<SweepPoint>> run_sweep(const SweepArgs& a) {
  std::vector<SweepPoint> points;
  const auto out = std::filesystem::temp_directory_path() / ("waste-sweep-" + std::to_string(::getpid()) + ".json");
  for (const auto& budget : a.budgets) {
    SweepPoint p;
    p.budget = budget;
    p.budget_bytes = parse_bytes(budget).value_or(0);
    if (a.drop_caches) p.page_cache_dropped = drop_page_cache();
    // --linger 0: the container's daemon this point's child starts goes right after it, so the
    // next point starts one at its own budget (see wait_auto_daemon_gone).
    std::vector<std::string> args{"bench", a.model, "--budget", budget, "--linger", "0", "--json"};
    args.insert(args.end(), a.child_args.begin(), a.child_args.end());
    auto pid = spawn_self(args, out);
    if (!pid) return std::unexpected(pid.error());
    auto rc = wait_child(*pid);
    if (!rc) return std::unexpected(rc.error());
    if (*rc != 0) return make_error(Errc::io, "--sweep: the run at budget " + budget + " exited with " + std::to_string(*rc));
    wait_auto_daemon_gone(a.model);
    std::ifstream in(out);
    std::ostringstream text;
    text << in.rdbuf();
    try {
      p.report = nlohmann::json::parse(text.str());
    } catch (const std::exception& e) {
      return make_error(Errc::format, "--sweep: the run at budget " + budget + " printed no JSON: " + e.what());
    }
    std::fprintf(stderr, "budget %s: decode %.2f tok/s, hit %.1f%%\n", budget.c_str(),
                 phase_value(p.report, "decode", "tokens_per_second"), hit_percent(p.report, "decode"));
    points.push_back(std::move(p));
  }
  std::error_code ec;
  std::filesystem::remove(out, ec);
  return points;
}

std::string sweep_markdown(const std::vector<SweepPoint>& points) {
  std::string md =
      "| budget | cache records | lookahead | prefill tok/s | decode tok/s | decode hit % | decode GB read | "
      "decode I/O wait s |\n|---|---|---|---|---|---|---|---|\n";
  char row[320];
  for (const auto& p : points) {
    std::snprintf(row, sizeof row, "| %s | %llu | %d | %.2f | %.2f | %.1f | %.3f | %.3f |\n", p.budget.c_str(),
                  static_cast<unsigned long long>(p.report.value("cache_records", std::uint64_t{0})),
                  p.report.value("lookahead", 0), phase_value(p.report, "prefill", "tokens_per_second"),
                  phase_value(p.report, "decode", "tokens_per_second"), hit_percent(p.report, "decode"),
                  phase_value(p.report, "decode", "bytes_read") / 1e9,
                  phase_value(p.report, "decode", "io_wait_seconds"));
    md += row;
  }
  return md;
}

nlohmann::json sweep_json(const std::vector<SweepPoint>& points) {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& p : points) {
    out.push_back({{"budget", p.budget},
                   {"budget_bytes", p.budget_bytes},
                   {"page_cache_dropped", p.page_cache_dropped},
                   {"decode_hit_percent", hit_percent(p.report, "decode")},
                   {"report", p.report}});
  }
  return out;
}

Status plot_sweep(const std::vector<SweepPoint>& points, const std::string& png, const std::string& title) {
  const std::string data = png + ".dat", script = png + ".gp";
  {
    std::ofstream d(data);
    d << "# budget_GB decode_tok_s decode_hit_percent label\n";
    for (const auto& p : points) {
      d << double(p.budget_bytes) / 1e9 << ' ' << phase_value(p.report, "decode", "tokens_per_second") << ' '
        << hit_percent(p.report, "decode") << ' ' << p.budget << '\n';
    }
    if (!d) return make_error(Errc::io, data + ": cannot write");
  }
  {
    std::ofstream g(script);
    g << "set terminal pngcairo size 800,480\n"
      << "set output '" << png << "'\n"
      << "set title '" << title << "'\n"
      << "set xlabel 'budget (GB)'\nset ylabel 'decode tok/s'\nset y2label 'decode hit %'\n"
      << "set ytics nomirror\nset y2tics\nset yrange [0:*]\nset y2range [0:100]\nset grid\nset key bottom right\n"
      << "plot '" << data << "' using 1:2 with linespoints lw 2 pt 7 title 'decode tok/s' axes x1y1, \\\n"
      << "     '" << data << "' using 1:3 with linespoints lw 2 pt 5 dt 2 title 'hit %' axes x1y2\n";
    if (!g) return make_error(Errc::io, script + ": cannot write");
  }
  const std::string cmd = "gnuplot '" + script + "'";
  if (std::system(cmd.c_str()) != 0) return make_error(Errc::io, "gnuplot failed on " + script);
  std::error_code ec;
  std::filesystem::remove(data, ec);
  std::filesystem::remove(script, ec);
  return {};
}

}  // namespace waste::cli::bench
