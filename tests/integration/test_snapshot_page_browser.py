"""placeholder"""
import json
from demo.stack import Users
DAG_TEAM = "enrichment"
USERS = Users(
    {"admin": ("admin", "admin-pw"), "viewer": ("viewer", "viewer-pw"), "outsider": ("op", "outsider-pw")},
    teams={"viewer": DAG_TEAM, "outsider": "others"},
)
TEAM_ENV = {
    "AIRFLOW__CORE__MULTI_TEAM": "True",
    "AIRFLOW__DAG_PROCESSOR__DAG_BUNDLE_CONFIG_LIST": json.dumps(
        [{"name": "dags-folder", "classpath": "airflow.dag_processing.bundles.local.LocalDagBundle", "kwargs": {}, "team_name": DAG_TEAM}]
    ),
}
SETUP = (("teams", "sync"), ("teams", "create", "others"))
