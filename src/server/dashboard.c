/*
 * GET / and GET /dashboard: the live dashboard page (see stats.h).
 *
 * The page is src/server/dashboard/index.html, one self-contained file (inline CSS and
 * JavaScript, its own canvas charts), turned into a C array at build time by
 * src/server/dashboard/embed.sh into $(BUILD)/gen/dashboard_html.h; the generated file is never
 * committed. The HTML holds no data: it polls GET /stats, which needs the API key when one is
 * set, so the page itself is public and asks for the key (docs/server.md).
 *
 * Headers: a Content-Security-Policy that lets the page talk to this origin only (no fonts,
 * scripts, images or connections to any other host; inline script and style are the page's
 * own), Cache-Control no-store (a new binary serves its new page at once), nosniff, and no
 * referrer.
 *
 * Threads: the event-loop thread.
 */
#include "server/stats.h"

#include "dashboard_html.h" // generated: tl_dashboard_html, tl_dashboard_html_len

#include <event2/http.h>
#include <event2/keyvalq_struct.h>

#define DASHBOARD_CSP                                                                              \
    "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; "                  \
    "connect-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'; "              \
    "frame-ancestors 'none'"

void tl_srv_h_dashboard(struct tl_server *s, struct evhttp_request *r, int64_t t0, json_t *body)
{
    struct evkeyvalq *hdr = evhttp_request_get_output_headers(r);
    evhttp_add_header(hdr, "Content-Security-Policy", DASHBOARD_CSP);
    evhttp_add_header(hdr, "Cache-Control", "no-store");
    evhttp_add_header(hdr, "X-Content-Type-Options", "nosniff");
    evhttp_add_header(hdr, "Referrer-Policy", "no-referrer");
    tl_http_access_log(r, 200, t0, 0, 0);
    tl_http_send_text(&s->http, r, 200, "text/html; charset=utf-8", (const char *)tl_dashboard_html,
                      tl_dashboard_html_len);
}
