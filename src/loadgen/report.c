/*
 * `tokenloom bench` results as JSON and as an SVG / HTML report (see report.h).
 *
 * DESIGN
 * JSON goes through jansson (escaping, and null for a statistic that has no value, e.g. the
 * percentiles of a level where every request failed: NaN is not JSON). Numbers are rounded to
 * what was measured (milliseconds to 3 decimals, throughputs to 3).
 *
 * The report is one SVG of four panels: output throughput, then TTFT, ITL and end-to-end
 * latency (p50 / p90 / p99) against concurrency. Levels are placed evenly in the order they were
 * run (they are usually powers of two, which a linear axis would crowd); each measured value is
 * one <circle class="point"> carrying data-series, data-concurrency and data-value (the same
 * number as in the JSON) and a <title> tooltip, so a test or a script can read the chart back.
 * Styles are attributes, fonts generic: nothing is fetched when it is opened. The HTML variant
 * is the same SVG inline plus a table of the numbers.
 *
 * Ownership: nothing is kept; every function writes to the FILE it is given. Single-threaded.
 */
#include "loadgen/report.h"

#include <jansson.h>
#include <math.h>
#include <string.h>
#include <time.h>

// ---- JSON ------------------------------------------------------------------------------------

static json_t *number(double v, double scale)
{
    if (!isfinite(v)) return json_null();
    return json_real(round(v * scale) / scale);
}

static const char *const stat_names[4] = {"ttft", "tpot", "itl", "e2el"};

static json_t *level_object(const struct tl_bench_config *c, const struct tl_bench_result *r)
{
    const double *v[4] = {r->ttft, r->tpot, r->itl, r->e2e};
    json_t *o = json_object();
    if (!o) return NULL;
    json_object_set_new(o, "concurrency", json_integer(c->concurrency));
    json_object_set_new(o, "rate", number(c->rate, 1e6));
    json_object_set_new(o, "completed", json_integer(r->n_ok));
    json_object_set_new(o, "failed", json_integer(r->n_failed));
    json_object_set_new(o, "duration_s", number(r->duration_s, 1e6));
    json_object_set_new(o, "prompt_tokens", json_integer(r->prompt_tokens));
    json_object_set_new(o, "output_tokens", json_integer(r->output_tokens));
    json_object_set_new(o, "request_throughput", number(r->req_per_s, 1e3));
    json_object_set_new(o, "output_throughput", number(r->out_tok_per_s, 1e3));
    json_object_set_new(o, "total_token_throughput", number(r->total_tok_per_s, 1e3));
    static const char *const which[4] = {"mean", "p50", "p90", "p99"};
    for (int i = 0; i < 4; i++)
        for (int k = 0; k < 4; k++) {
            char key[32];
            snprintf(key, sizeof(key), "%s_%s_ms", which[k], stat_names[i]);
            json_object_set_new(o, key, number(v[i][k] * 1e3, 1e3));
        }
    if (r->first_error[0]) json_object_set_new(o, "first_error", json_string(r->first_error));
    return o;
}

static void dump(json_t *o, FILE *f)
{
    if (o) json_dumpf(o, f, JSON_COMPACT | JSON_REAL_PRECISION(12));
    fputc('\n', f);
    json_decref(o);
}

void tl_bench_write_level_json(const struct tl_bench_config *c, const struct tl_bench_result *r,
                               FILE *f)
{
    dump(level_object(c, r), f);
}

static void iso_time(int64_t unix_s, char out[32])
{
    time_t t = (time_t)unix_s;
    struct tm tm;
    gmtime_r(&t, &tm);
    strftime(out, 32, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

void tl_bench_write_json(const struct tl_bench_sweep *s, FILE *f)
{
    const struct tl_bench_config *c0 = &s->levels[0].config;
    char when[32];
    iso_time(s->started_unix_s, when);
    json_t *levels = json_array();
    for (int i = 0; i < s->n_levels; i++)
        json_array_append_new(levels, level_object(&s->levels[i].config, &s->levels[i].result));
    json_t *o = json_object();
    json_object_set_new(o, "tool", json_string("tokenloom bench"));
    json_object_set_new(o, "started", json_string(when));
    json_object_set_new(o, "url", json_string(c0->url));
    json_object_set_new(o, "endpoint",
                        json_string(c0->chat ? "/v1/chat/completions" : "/v1/completions"));
    json_object_set_new(o, "requests_per_level", json_integer(c0->n_requests));
    json_object_set_new(o, "rate", number(c0->rate, 1e6));
    json_object_set_new(o, "prompt_len", json_string(s->prompt_len ? s->prompt_len : ""));
    json_object_set_new(o, "output_len", json_string(s->output_len ? s->output_len : ""));
    json_object_set_new(o, "seed", json_integer((json_int_t)c0->seed));
    json_object_set_new(o, "levels", levels);
    dump(o, f);
}

// ---- the SVG report --------------------------------------------------------------------------

static void xml_text(FILE *f, const char *s)
{
    for (; s && *s; s++) {
        switch (*s) {
        case '&':
            fputs("&amp;", f);
            break;
        case '<':
            fputs("&lt;", f);
            break;
        case '>':
            fputs("&gt;", f);
            break;
        case '"':
            fputs("&quot;", f);
            break;
        default:
            // Control characters are not allowed in XML 1.0 text.
            fputc((unsigned char)*s < 0x20 && *s != '\t' ? '?' : *s, f);
        }
    }
}

struct series {
    const char *id, *label, *color;
    double values[64]; // per level (NaN = none)
};

// A round axis top (1, 2 or 5 times a power of ten, times the tick count) above max.
static double axis_step(double max)
{
    if (!(max > 0)) return 0.25;
    double raw = max / 4.0;
    double p = pow(10.0, floor(log10(raw)));
    double m = raw / p;
    return p * (m <= 1 ? 1 : m <= 2 ? 2 : m <= 5 ? 5 : 10);
}

enum { PANEL_W = 460, PANEL_H = 300, PAD_L = 64, PAD_R = 16, PAD_T = 34, PAD_B = 46 };

static void panel(FILE *f, const struct tl_bench_sweep *sw, double x0, double y0, const char *title,
                  const struct series *ser, int n_ser)
{
    int n = sw->n_levels;
    double max = 0;
    for (int k = 0; k < n_ser; k++)
        for (int i = 0; i < n; i++)
            if (isfinite(ser[k].values[i]) && ser[k].values[i] > max) max = ser[k].values[i];
    double step = axis_step(max);
    int ticks = (int)ceil(max / step);
    if (ticks < 1) ticks = 1;
    double top = step * ticks;
    double pw = PANEL_W - PAD_L - PAD_R, ph = PANEL_H - PAD_T - PAD_B;
    double ox = x0 + PAD_L, oy = y0 + PAD_T + ph; // the origin (bottom left)
#define PX(i) (ox + (n > 1 ? pw * (0.05 + 0.9 * (double)(i) / (n - 1)) : pw / 2))
#define PY(v) (oy - ph * (v) / top)
    fprintf(f, "<g class=\"panel\">\n");
    fprintf(f,
            "<text x=\"%.1f\" y=\"%.1f\" font-size=\"15\" font-weight=\"bold\" "
            "font-family=\"sans-serif\">",
            x0 + PAD_L, y0 + 20);
    xml_text(f, title);
    fprintf(f, "</text>\n");
    for (int t = 0; t <= ticks; t++) {
        double y = PY(step * t);
        fprintf(f,
                "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#ddd\"/>"
                "<text x=\"%.1f\" y=\"%.1f\" font-size=\"11\" text-anchor=\"end\" "
                "font-family=\"sans-serif\">%g</text>\n",
                ox, y, ox + pw, y, ox - 6, y + 4, step * t);
    }
    fprintf(f,
            "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#333\"/>"
            "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#333\"/>\n",
            ox, oy, ox + pw, oy, ox, oy, ox, oy - ph);
    for (int i = 0; i < n; i++)
        fprintf(f,
                "<text x=\"%.1f\" y=\"%.1f\" font-size=\"11\" text-anchor=\"middle\" "
                "font-family=\"sans-serif\">%d</text>\n",
                PX(i), oy + 16, sw->levels[i].config.concurrency);
    fprintf(f,
            "<text x=\"%.1f\" y=\"%.1f\" font-size=\"11\" text-anchor=\"middle\" "
            "font-family=\"sans-serif\">concurrency (requests in flight)</text>\n",
            ox + pw / 2, oy + 34);
    for (int k = 0; k < n_ser; k++) {
        const struct series *s = &ser[k];
        fprintf(f, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"2\" points=\"", s->color);
        for (int i = 0; i < n; i++)
            if (isfinite(s->values[i])) fprintf(f, "%.1f,%.1f ", PX(i), PY(s->values[i]));
        fprintf(f, "\"/>\n");
        for (int i = 0; i < n; i++) {
            if (!isfinite(s->values[i])) continue;
            fprintf(f,
                    "<circle class=\"point\" cx=\"%.1f\" cy=\"%.1f\" r=\"4\" fill=\"%s\" "
                    "data-series=\"%s\" data-concurrency=\"%d\" data-value=\"%.3f\">"
                    "<title>%s at concurrency %d: %.3f</title></circle>\n",
                    PX(i), PY(s->values[i]), s->color, s->id, sw->levels[i].config.concurrency,
                    s->values[i], s->label, sw->levels[i].config.concurrency, s->values[i]);
        }
        double lx = ox + 8 + 70.0 * k, ly = y0 + PAD_T + 4;
        fprintf(f,
                "<rect x=\"%.1f\" y=\"%.1f\" width=\"10\" height=\"10\" fill=\"%s\"/>"
                "<text x=\"%.1f\" y=\"%.1f\" font-size=\"11\" font-family=\"sans-serif\">",
                lx, ly, s->color, lx + 14, ly + 9);
        xml_text(f, s->label);
        fprintf(f, "</text>\n");
    }
    fprintf(f, "</g>\n");
#undef PX
#undef PY
}

static void write_svg(const struct tl_bench_sweep *sw, FILE *f)
{
    int n = sw->n_levels < 64 ? sw->n_levels : 64;
    struct tl_bench_sweep s = *sw;
    s.n_levels = n;
    struct series thr[1] = {{"output_throughput", "output tok/s", "#2ca02c", {0}}};
    static const char *const pct_color[3] = {"#1f77b4", "#ff7f0e", "#d62728"};
    static const char *const pct_name[3] = {"p50", "p90", "p99"};
    struct series lat[3][3]; // ttft, itl, e2el x p50, p90, p99
    static const char *const lat_stat[3] = {"ttft", "itl", "e2el"};
    char ids[3][3][16];
    for (int i = 0; i < n; i++)
        thr[0].values[i] = round(sw->levels[i].result.out_tok_per_s * 1e3) / 1e3;
    for (int a = 0; a < 3; a++)
        for (int p = 0; p < 3; p++) {
            snprintf(ids[a][p], sizeof(ids[a][p]), "%s_%s", lat_stat[a], pct_name[p]);
            lat[a][p].id = ids[a][p];
            lat[a][p].label = pct_name[p];
            lat[a][p].color = pct_color[p];
            for (int i = 0; i < n; i++) {
                const struct tl_bench_result *r = &sw->levels[i].result;
                const double *v = a == 0 ? r->ttft : a == 1 ? r->itl : r->e2e;
                lat[a][p].values[i] = round(v[p + 1] * 1e3 * 1e3) / 1e3; // ms, as the JSON rounds
            }
        }
    const struct tl_bench_config *c0 = &sw->levels[0].config;
    char when[32];
    iso_time(sw->started_unix_s, when);
    int W = 2 * PANEL_W + 20, H = 2 * PANEL_H + 70;
    fprintf(f,
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
            "viewBox=\"0 0 %d %d\">\n<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n",
            W, H, W, H);
    fprintf(f, "<text x=\"10\" y=\"24\" font-size=\"14\" font-family=\"sans-serif\">tokenloom "
               "bench: ");
    xml_text(f, c0->url);
    fprintf(f, "%s, %lld requests per level, prompt ", c0->chat ? " (chat)" : "",
            (long long)c0->n_requests);
    xml_text(f, sw->prompt_len);
    fprintf(f, " tokens, output ");
    xml_text(f, sw->output_len);
    fprintf(f, " tokens, %s</text>\n", when);
    double y1 = 40, y2 = 40 + PANEL_H + 20;
    panel(f, &s, 0, y1, "Output throughput (tokens/s)", thr, 1);
    panel(f, &s, PANEL_W + 20, y1, "Time to first token (ms)", lat[0], 3);
    panel(f, &s, 0, y2, "Inter-token latency (ms)", lat[1], 3);
    panel(f, &s, PANEL_W + 20, y2, "End-to-end latency (ms)", lat[2], 3);
    fprintf(f, "</svg>\n");
}

void tl_bench_write_report(const struct tl_bench_sweep *s, bool html, FILE *f)
{
    if (!html) {
        fprintf(f, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
        write_svg(s, f);
        return;
    }
    fprintf(f, "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
               "<title>tokenloom bench</title></head>\n<body style=\"font-family: sans-serif\">\n");
    write_svg(s, f);
    fprintf(f, "<table border=\"1\" cellpadding=\"4\" style=\"border-collapse: collapse\">\n"
               "<tr><th>concurrency</th><th>completed</th><th>failed</th><th>req/s</th>"
               "<th>output tok/s</th><th>TTFT p50/p99 ms</th><th>ITL p50/p99 ms</th>"
               "<th>E2E p50/p99 ms</th></tr>\n");
    for (int i = 0; i < s->n_levels; i++) {
        const struct tl_bench_result *r = &s->levels[i].result;
        fprintf(f,
                "<tr><td>%d</td><td>%lld</td><td>%lld</td><td>%.2f</td><td>%.1f</td>"
                "<td>%.1f / %.1f</td><td>%.2f / %.2f</td><td>%.1f / %.1f</td></tr>\n",
                s->levels[i].config.concurrency, (long long)r->n_ok, (long long)r->n_failed,
                r->req_per_s, r->out_tok_per_s, r->ttft[1] * 1e3, r->ttft[3] * 1e3, r->itl[1] * 1e3,
                r->itl[3] * 1e3, r->e2e[1] * 1e3, r->e2e[3] * 1e3);
    }
    fprintf(f, "</table>\n</body></html>\n");
}
