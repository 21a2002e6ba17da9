#include "cli/bench/bench_engine.hpp"

namespace waste::cli::bench {

Result<BenchEngine> open_bench_engine(const BenchEngineArgs& args) {
  auto container = read_container(args.engine.model);
  if (!container) return std::unexpected(container.error());
  WASTE_TRY(check_cache_records(args.engine));
  OpenRequest request = open_request(args.engine, std::move(*container));
  request.engine.lookahead = args.lookahead;
  request.engine.profile = args.profile;
  request.engine.resident_experts = args.resident;
  request.engine.prefill_chunk = args.prefill_chunk;
  request.embedding_on_disk = args.embedding_on_disk;
  request.engine.engram_readahead = args.engram_readahead;
  BenchEngine out;
  if (args.record_trace) {
    out.trace = std::make_shared<std::vector<TraceEvent>>();
    request.wrap_source = [trace = out.trace](std::unique_ptr<ExpertSource> source) -> std::unique_ptr<ExpertSource> {
      return std::make_unique<TracingExpertSource>(std::move(source), trace);
    };
  }
  auto opened = waste::open_engine(request);  // no shared-daemon warning: the report says what applied
  if (!opened) return std::unexpected(opened.error());
  out.open = std::move(*opened);
  return out;
}

}  // namespace waste::cli::bench
