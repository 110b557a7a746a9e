"""Tenants on the server (issue 35): the gateway names the tenant with the metadata
x-tokenmill-tenant on a call that carries the server's --api-key; the server believes it only
then. Each tenant's cached prompt prefixes are its own unless --shared-prefix-cache, and a
priority ahead of the default needs the key."""
import grpc
import pytest

from server_harness import Server, pb2

API_KEY = "tenant-test-key"
AUTH = ("authorization", f"Bearer {API_KEY}")
# Long enough for several full KV blocks (16 tokens) to be cached.
PROMPT = ("The quarterly report lists the following figures for each region in detail: north "
          "twelve, south nine, east fourteen, west eleven, and the central office seven; the "
          "totals are reconciled at the end of the month by the finance team. ") * 2


def as_tenant(tenant):
    return [AUTH, ("x-tokenmill-tenant", tenant)]


def generate_as(server, metadata, request):
    """One Generate stream with `metadata`: its responses."""
    return list(server.stub.Generate(request, metadata=metadata, timeout=60))


def cached_tokens(server, metadata, cache_salt=""):
    """The prompt tokens PROMPT found in the prefix cache, sent with `metadata` and the salt."""
    request = pb2.GenerateRequest(text=PROMPT, max_tokens=1, cache_salt=cache_salt)
    usage = generate_as(server, metadata, request)[-1].usage
    assert usage.prompt_tokens > 48
    return usage.cached_prompt_tokens


@pytest.fixture(scope="module")
def server():
    with Server("--api-key", API_KEY) as s:
        yield s


def test_without_the_servers_key_no_call_may_name_a_tenant():
    with Server() as open_server:
        for call in (
                lambda md: generate_as(open_server, md,
                                       pb2.GenerateRequest(text="Hi", max_tokens=1)),
                lambda md: open_server.stub.Tokenize(pb2.TokenizeRequest(text="Hi"),
                                                     metadata=md, timeout=30)):
            with pytest.raises(grpc.RpcError) as error:
                call([("x-tokenmill-tenant", "acme")])
            assert error.value.code() == grpc.StatusCode.PERMISSION_DENIED
            assert "x-tokenmill-tenant" in error.value.details()
            assert "--api-key" in error.value.details()
        # Without a key the server has one tenant, whoever reaches it: it may raise priority.
        responses = generate_as(open_server, [],
                                pb2.GenerateRequest(text="Hi", max_tokens=2, priority=-5))
        assert responses[-1].usage.completion_tokens == 2


def test_with_the_key_the_tenant_is_believed(server):
    responses = generate_as(server, as_tenant("acme"), pb2.GenerateRequest(text="Hi",
                                                                          max_tokens=2))
    assert responses[-1].usage.completion_tokens == 2
    # A wrong key is refused before the tenant is looked at.
    with pytest.raises(grpc.RpcError) as error:
        generate_as(server, [("authorization", "Bearer wrong"), ("x-tokenmill-tenant", "acme")],
                    pb2.GenerateRequest(text="Hi", max_tokens=1))
    assert error.value.code() == grpc.StatusCode.UNAUTHENTICATED
    with pytest.raises(grpc.RpcError) as error:
        generate_as(server, as_tenant("x" * 300), pb2.GenerateRequest(text="Hi", max_tokens=1))
    assert error.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "at most 256" in error.value.details()


def test_a_priority_ahead_of_the_default_runs_with_the_key(server):
    responses = generate_as(server, [AUTH], pb2.GenerateRequest(text="Hi", max_tokens=1,
                                                                priority=-1))
    assert responses[-1].usage.completion_tokens == 1


def test_tenants_do_not_share_cached_prefixes(server):
    assert cached_tokens(server, as_tenant("red"), "s") == 0
    assert cached_tokens(server, as_tenant("red"), "s") > 0  # its own prefix is cached
    # Same prompt, same client salt, another tenant: nothing of red's is visible.
    assert cached_tokens(server, as_tenant("blue"), "s") == 0
    # An anonymous client cannot spell red's salt: not its raw form, nor the derived one.
    assert cached_tokens(server, [AUTH], "s") == 0
    assert cached_tokens(server, [AUTH], "3:reds") == 0
    assert cached_tokens(server, as_tenant("re"), "ds") == 0


def test_shared_prefix_cache_shares_across_tenants():
    with Server("--api-key", API_KEY, "--shared-prefix-cache") as shared:
        assert cached_tokens(shared, as_tenant("red"), "s") == 0
        assert cached_tokens(shared, as_tenant("blue"), "s") > 0
        assert cached_tokens(shared, [AUTH], "s") > 0
        # The client's salt still keeps apart what it names apart.
        assert cached_tokens(shared, as_tenant("blue"), "other") == 0
