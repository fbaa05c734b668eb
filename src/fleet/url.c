/* url.c: where the client connects and as whom: the server URL
 * ("redis://HOST[:PORT][/DB]", "unix:///PATH[?db=N]") and the credentials,
 * read from a file or an environment variable. Credentials never come from
 * the URL (a URL ends up in argv, ps and logs); one with a user part is
 * refused. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "src/fleet/internal.h"
#include "tuned.h"

static int parse_int(const char *s, const char *end, long lo, long hi, long *out)
{
    if (s == end || end - s > 10)
        return -1;
    long v = 0;
    for (const char *p = s; p < end; p++) {
        if (*p < '0' || *p > '9')
            return -1;
        v = v * 10 + (*p - '0');
    }
    if (v < lo || v > hi)
        return -1;
    *out = v;
    return 0;
}

static int parse_unix(tuned__fleet *f, const char *url, const char *rest, tuned__err *e)
{
    const char *q = strchr(rest, '?');
    size_t plen = q != NULL ? (size_t)(q - rest) : strlen(rest);
    if (plen == 0 || rest[0] != '/')
        return tuned__errf(e, TUNED_EINVAL, "remote '%s': unix:// needs an absolute path "
                           "(unix:///run/redis/redis.sock)", url);
    if (plen >= sizeof f->path)
        return tuned__errf(e, TUNED_EINVAL, "remote '%s': socket path longer than %zu bytes",
                           url, sizeof f->path - 1);
    memcpy(f->path, rest, plen);
    f->path[plen] = '\0';
    f->unix_socket = true;
    f->db = 0;
    if (q != NULL) {
        long db;
        if (strncmp(q, "?db=", 4) != 0 || parse_int(q + 4, q + strlen(q), 0, 1000000, &db) != 0)
            return tuned__errf(e, TUNED_EINVAL, "remote '%s': the only query is ?db=N", url);
        f->db = (int)db;
    }
    return 0;
}

int tuned__fleet_parse_url(tuned__fleet *f, const char *url, tuned__err *e)
{
    if (url == NULL)
        return tuned__errf(e, TUNED_EINVAL, "remote: no URL");
    if (strncmp(url, "unix://", 7) == 0)
        return parse_unix(f, url, url + 7, e);
    if (strncmp(url, "redis://", 8) != 0)
        return tuned__errf(e, TUNED_EINVAL, "remote '%s': not redis://HOST[:PORT][/DB] or "
                           "unix:///PATH[?db=N] (rediss:// needs TLS, which this hiredis lacks: "
                           "see docs/fleet.md)", url);
    const char *h = url + 8;
    const char *slash = strchr(h, '/');
    const char *hend = slash != NULL ? slash : h + strlen(h);
    if (memchr(h, '@', (size_t)(hend - h)) != NULL)
        return tuned__errf(e, TUNED_EINVAL, "remote: credentials in the URL are refused (they "
                           "would show in argv); use a credentials file or variable");
    const char *pstart = NULL;
    const char *name = h, *name_end;
    if (*h == '[') {
        const char *close = memchr(h, ']', (size_t)(hend - h));
        if (close == NULL)
            return tuned__errf(e, TUNED_EINVAL, "remote '%s': unclosed '['", url);
        name = h + 1;
        name_end = close;
        if (close + 1 < hend) {
            if (close[1] != ':')
                return tuned__errf(e, TUNED_EINVAL, "remote '%s': junk after ']'", url);
            pstart = close + 2;
        }
    } else {
        const char *colon = memchr(h, ':', (size_t)(hend - h));
        name_end = colon != NULL ? colon : hend;
        if (colon != NULL)
            pstart = colon + 1;
    }
    if (name_end == name || (size_t)(name_end - name) >= sizeof f->host)
        return tuned__errf(e, TUNED_EINVAL, "remote '%s': no host, or a host too long", url);
    memcpy(f->host, name, (size_t)(name_end - name));
    f->host[name_end - name] = '\0';
    long port = 6379, db = 0;
    if (pstart != NULL && parse_int(pstart, hend, 1, 65535, &port) != 0)
        return tuned__errf(e, TUNED_EINVAL, "remote '%s': port is not 1..65535", url);
    if (slash != NULL && slash[1] != '\0' &&
        parse_int(slash + 1, slash + strlen(slash), 0, 1000000, &db) != 0)
        return tuned__errf(e, TUNED_EINVAL, "remote '%s': database is not a number", url);
    f->port = (int)port;
    f->db = (int)db;
    f->unix_socket = false;
    return 0;
}

/* "USER:PASSWORD" or "PASSWORD", one line, its end of line dropped. */
static int parse_credentials(tuned__fleet *f, char *text, const char *from, tuned__err *e)
{
    text[strcspn(text, "\r\n")] = '\0';
    if (text[0] == '\0')
        return tuned__errf(e, TUNED_EINVAL, "remote credentials (%s): empty", from);
    char *colon = strchr(text, ':');
    const char *pw = text;
    f->user[0] = '\0';
    if (colon != NULL) {
        if ((size_t)(colon - text) >= sizeof f->user)
            return tuned__errf(e, TUNED_EINVAL, "remote credentials (%s): user name too long",
                               from);
        memcpy(f->user, text, (size_t)(colon - text));
        f->user[colon - text] = '\0';
        pw = colon + 1;
    }
    if (pw[0] == '\0' || strlen(pw) >= sizeof f->password)
        return tuned__errf(e, TUNED_EINVAL, "remote credentials (%s): password empty or longer "
                           "than %zu bytes", from, sizeof f->password - 1);
    snprintf(f->password, sizeof f->password, "%s", pw);
    f->auth = true;
    return 0;
}

int tuned__fleet_read_credentials(tuned__fleet *f, const tuned__fleet_opts *o, tuned__err *e)
{
    char buf[512];
    int rc = 0;
    f->auth = false;
    if (o->credentials_file != NULL && o->credentials_env != NULL)
        return tuned__errf(e, TUNED_EINVAL, "remote credentials: a file or a variable, not both");
    if (o->credentials_file != NULL) {
        FILE *in = fopen(o->credentials_file, "r");
        if (in == NULL)
            return tuned__errf(e, TUNED_EIO, "remote credentials %s: %s", o->credentials_file,
                               strerror(errno));
        if (fgets(buf, sizeof buf, in) == NULL)
            buf[0] = '\0';
        fclose(in);
        rc = parse_credentials(f, buf, o->credentials_file, e);
    } else if (o->credentials_env != NULL) {
        const char *v = getenv(o->credentials_env);
        if (v == NULL)
            return tuned__errf(e, TUNED_EINVAL, "remote credentials: $%s is not set",
                               o->credentials_env);
        if (strlen(v) >= sizeof buf)
            return tuned__errf(e, TUNED_EINVAL, "remote credentials: $%s is too long",
                               o->credentials_env);
        snprintf(buf, sizeof buf, "%s", v);
        char from[160];
        snprintf(from, sizeof from, "$%.150s", o->credentials_env);
        rc = parse_credentials(f, buf, from, e);
    }
    memset(buf, 0, sizeof buf);
    return rc;
}
