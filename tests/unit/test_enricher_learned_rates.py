"""A partition's learned share of a rate limit reaches the next partition of the same
API and credential in this worker, and only while it is recent."""

from spark_jobs.enrichers import learned_rates
from spark_jobs.enrichers.config import HttpEnricherConfig
from spark_jobs.enrichers.sender import RequestSender

from .test_enricher_rate_control import FakeClock


def config(url: str, **extra: object) -> HttpEnricherConfig:
    fields = {"url_template": url, "response_fields": {"city": "$.city"}}
    return HttpEnricherConfig.from_dict({**fields, **extra})


async def test_the_next_sender_of_the_same_api_and_credential_starts_at_the_share_found():
    api = config("http://api.test:8080/v1/{id}", secret_headers={"X-Api-Key": "GEO_KEY"})
    first = RequestSender(api, None)
    assert first.rate.slow_start
    first.rate.ceiling_hint = 97.0  # what its last cut found the server accepting
    await first.close()
    same_api = config("http://api.test:8080/v2/{id}", secret_headers={"X-Api-Key": "GEO_KEY"})
    successor = RequestSender(same_api, None)
    assert not successor.rate.slow_start
    assert successor.rate.ceiling_hint == 97.0
    for other in (
        config("http://api.test:8080/v1/{id}", secret_headers={"X-Api-Key": "OTHER_KEY"}),
        config("http://elsewhere.test/v1/{id}", secret_headers={"X-Api-Key": "GEO_KEY"}),
    ):
        assert RequestSender(other, None).rate.slow_start, learned_rates.key_for(other)


async def test_a_given_rate_is_not_learned_nor_overridden():
    api = config("http://given.test/{id}", requests_per_second=40)
    sender = RequestSender(api, None)
    sender.rate.ceiling_hint = 33.0
    await sender.close()
    assert learned_rates.recall(learned_rates.key_for(api)) is None
    assert RequestSender(api, None).rate.rate == 40


def test_a_learned_rate_is_forgotten_once_its_neighbours_are_likely_gone():
    clock = FakeClock()
    learned_rates.remember("k", 120.0, clock)
    clock.now += learned_rates.MAX_AGE_S - 1
    assert learned_rates.recall("k", clock) == 120.0
    clock.now += 2
    assert learned_rates.recall("k", clock) is None
    learned_rates.remember("k", 0.0, clock)  # nothing accepted: nothing learned
    assert learned_rates.recall("k", clock) is None
