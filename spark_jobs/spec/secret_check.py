"""The driver's check that every secret the spec names exists, before Spark starts.

The executors read the secrets (``token_env``, ``secret_headers``) where their HTTP
sessions open; a missing one used to surface there, as a task failure after Spark had
started. The driver checks the names first and fails in a second, naming the option;
so too the response cache's key (``--cache-key-env``) when the API has no secret to
derive one from (``cache_scope.py``).

Where the driver's environment is not the executors' (a cluster), a variable is also
accepted when the Spark configuration hands it to the executors:
``spark.executorEnv.<VAR>`` or ``spark.kubernetes.executor.secretKeyRef.<VAR>``. That
configuration is only read under ``spark-submit``, whose JVM is already running; run as
``python -m`` the driver's environment is the executors' (``local[*]``), or the variable
is set in it.
"""

from __future__ import annotations

from spark_jobs.enrichers.secrets import SecretError, check_secret_variables, secret_variables
from spark_jobs.spec.job_spec import JobSpec
from spark_jobs.spec.launch_conf import launch_conf, under_spark_submit
from spark_jobs.spec.spec_error import SpecError

#: Spark settings that give the executors an environment variable (suffix: its name).
EXECUTOR_ENV_CONFS = ("spark.executorEnv.", "spark.kubernetes.executor.secretKeyRef.")


def check_secrets(spec: JobSpec) -> None:
    """SpecError ``http.secret_headers.X-Api-Key: environment variable CRM_KEY is not
    set`` for the first secret variable that is set nowhere."""
    if spec.enricher:
        return  # a user's function reads its own secrets
    config = spec.http_config()
    try:
        check_secret_variables(
            secret_variables(config.token_env, config.secret_headers), _in_spark_conf
        )
    except SecretError as error:
        raise SpecError(f"http.{error}") from None
    has_secret = config.token_env or config.token_file or config.secret_headers
    if spec.cache_dir and not has_secret:  # the key cannot be derived: it must be given
        try:
            check_secret_variables([("cache_key_env", spec.cache_key_env)], _in_spark_conf)
        except SecretError as error:
            raise SpecError(
                f"--cache-dir: {error}, and the API has no secret to derive a key from: "
                "set it to a random value only this deployment knows (the cache's entries "
                "are signed with it)"
            ) from None


def secret_variable_names(spec: JobSpec) -> list[str]:
    """The environment variables the executors read the spec's secrets from."""
    if spec.enricher:
        return []
    config = spec.http_config()
    return [name for _, name in secret_variables(config.token_env, config.secret_headers)]


def _in_spark_conf(variable: str) -> bool:
    if not under_spark_submit():  # python -m: reading it would start Spark
        return False
    conf = launch_conf()
    return any(conf.contains(prefix + variable) for prefix in EXECUTOR_ENV_CONFS)
