// Warm-decode harness for the public C engine (sqliteai/warp), built against its libwaste.a
// outside this tree by scripts/bench/side_by_side.sh; nothing of that engine is committed here.
// usage: public_engine_harness MODEL BUDGET_GIB N_WARM N_MEASURE ID,ID,... [ROUNDS]
// Round 0 (N_WARM greedy tokens) fills the public engine's cache with exactly the experts the
// measured rounds use (same prompt, greedy: same tokens); each later round resets the state and
// decodes N_MEASURE tokens again, printing ms/token without the first (prefill) token, its
// hit/miss counts and the token ids, which the script compares with ours.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "waste.h"  // the public engine's header (-I its src/)
typedef struct { int n; double ms[4096]; int tok[4096]; unsigned hit, miss; unsigned long long bytes; } rec;
static int cb(const waste_token_info *i, const char *piece, void *u) {
  rec *r = u; (void)piece;
  if (r->n < 4096) { r->ms[r->n] = i->ms_total; r->tok[r->n] = i->token; }
  r->n++; r->hit += i->experts_hit; r->miss += i->experts_missed; r->bytes += i->bytes_read;
  return 0;
}
int main(int argc, char **argv) {
  if (argc < 6) { fprintf(stderr, "usage\n"); return 2; }
  waste_cfg cfg; waste_cfg_init(&cfg);
  cfg.ram_budget_bytes = (unsigned long long)(atof(argv[2]) * (1ULL << 30));
  cfg.ctx_tokens = 8192;
  int nwarm = atoi(argv[3]), nmeas = atoi(argv[4]);
  int32_t ids[8192]; size_t n = 0;
  for (char *t = strtok(argv[5], ","); t; t = strtok(NULL, ",")) ids[n++] = atoi(t);
  waste_ctx *c; waste_status st = waste_open(argv[1], &cfg, &c);
  if (st != WASTE_OK) { fprintf(stderr, "open failed %d\n", st); return 1; }
  waste_gen_params p; waste_gen_params_init(&p); p.temperature = 0;
  static rec r;
  for (int round = 0; round < 1 + (argc > 6 ? atoi(argv[6]) : 1); ++round) {
    memset(&r, 0, sizeof r);
    waste_state_reset(c);
    p.max_tokens = round == 0 ? nwarm : nmeas;
    st = waste_generate(c, ids, n, &p, cb, &r);
    if (st != WASTE_OK) { fprintf(stderr, "generate failed %d %s\n", st, waste_error_detail(c)); return 1; }
    double s = 0; int k = 0;
    for (int i = 1; i < r.n && i < 4096; ++i) { s += r.ms[i]; ++k; }
    printf("round %d: %d tokens, decode %.1f ms/token (excl. first), first %.1f ms, hits %u misses %u, %.2f GB read\n",
           round, r.n, k ? s / k : 0, r.ms[0], r.hit, r.miss, r.bytes / 1e9);
    printf("tokens:");
    for (int i = 0; i < r.n && i < 4096; ++i) printf("%s%d", i ? "," : "", r.tok[i]);
    printf("\n"); fflush(stdout);
  }
  waste_close(c);
  return 0;
}
