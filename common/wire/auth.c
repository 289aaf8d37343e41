/* HMAC-SHA256 challenge/response with libsodium. */
#include "auth.h"

#include <errno.h>
#include <fcntl.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int auth_secret_load(auth_secret *s, const char *path, char *err, size_t errlen)
{
    memset(s, 0, sizeof(*s));
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        int e = errno;
        snprintf(err, errlen, "%s: cannot open secret file: %s", path, strerror(e));
        return -e;
    }
    ssize_t n = read(fd, s->key, sizeof(s->key));
    int e = errno;
    char extra;
    ssize_t more = n >= 0 ? read(fd, &extra, 1) : 0;
    close(fd);
    if (n < 0) {
        snprintf(err, errlen, "%s: cannot read secret file: %s", path, strerror(e));
        return -e;
    }
    if (more > 0) {
        snprintf(err, errlen, "%s: secret file larger than %d bytes", path, AUTH_SECRET_MAX);
        sodium_memzero(s->key, sizeof(s->key));
        return -EFBIG;
    }
    while (n > 0 && (s->key[n - 1] == '\n' || s->key[n - 1] == '\r'))
        n--;
    if (n == 0) {
        snprintf(err, errlen, "%s: secret file is empty", path);
        return -EINVAL;
    }
    s->len = (size_t)n;
    return 0;
}

int auth_secret_set(auth_secret *s, const void *key, size_t len)
{
    memset(s, 0, sizeof(*s));
    if (len == 0 || len > AUTH_SECRET_MAX)
        return -EINVAL;
    memcpy(s->key, key, len);
    s->len = len;
    return 0;
}

void auth_secret_random(auth_secret *s)
{
    memset(s, 0, sizeof(*s));
    if (sodium_init() < 0)
        abort();
    randombytes_buf(s->key, 32);
    s->len = 32;
}

void auth_nonce(uint8_t out[AUTH_NONCE_LEN])
{
    if (sodium_init() < 0)
        abort(); /* no entropy source: nothing can be authenticated */
    randombytes_buf(out, AUTH_NONCE_LEN);
}

void auth_proof(uint8_t mac[AUTH_MAC_LEN], const auth_secret *s, bool from_dialer,
                const uint8_t dialer_nonce[AUTH_NONCE_LEN],
                const uint8_t acceptor_nonce[AUTH_NONCE_LEN], const char *user)
{
    static const char dialer_label[] = "wsap-auth-v1 dialer";
    static const char acceptor_label[] = "wsap-auth-v1 acceptor";
    const char *label = from_dialer ? dialer_label : acceptor_label;
    crypto_auth_hmacsha256_state st;
    crypto_auth_hmacsha256_init(&st, s->key, s->len);
    crypto_auth_hmacsha256_update(&st, (const unsigned char *)label, strlen(label) + 1);
    crypto_auth_hmacsha256_update(&st, dialer_nonce, AUTH_NONCE_LEN);
    crypto_auth_hmacsha256_update(&st, acceptor_nonce, AUTH_NONCE_LEN);
    if (user && user[0]) /* absent for the cluster secret: proofs as before users existed */
        crypto_auth_hmacsha256_update(&st, (const unsigned char *)user, strlen(user) + 1);
    crypto_auth_hmacsha256_final(&st, mac);
    sodium_memzero(&st, sizeof(st));
}

bool auth_verify(const uint8_t *mac, size_t len, const auth_secret *s, bool from_dialer,
                 const uint8_t dialer_nonce[AUTH_NONCE_LEN],
                 const uint8_t acceptor_nonce[AUTH_NONCE_LEN], const char *user)
{
    if (len != AUTH_MAC_LEN || s->len == 0)
        return false;
    uint8_t expect[AUTH_MAC_LEN];
    auth_proof(expect, s, from_dialer, dialer_nonce, acceptor_nonce, user);
    bool ok = crypto_verify_32(mac, expect) == 0;
    sodium_memzero(expect, sizeof(expect));
    return ok;
}

void auth_secret_clear(auth_secret *s)
{
    sodium_memzero(s, sizeof(*s));
}
