"""batch/v1 Job and CronJob: Pods run to completion, now or on a schedule.

A **Job** creates Pods from ``spec.template`` until ``spec.completions`` of them have succeeded
(``NonIndexed``: any Pods; ``Indexed``: one per completion index), running at most
``spec.parallelism`` at once, and fails once ``spec.backoffLimit`` Pods have failed or
``activeDeadlineSeconds`` has passed. Its template's ``restartPolicy`` must be ``Never`` or
``OnFailure``. Unless ``manualSelector`` is true the server makes the selector itself: the
Job's uid as the label ``batch.kubernetes.io/controller-uid``, put on the template too (with
``batch.kubernetes.io/job-name`` and the legacy ``controller-uid``/``job-name``). ``status``
counts active, succeeded, failed (and terminating, ready) Pods and carries the ``Complete``,
``Failed``, ``Suspended``, ``FailureTarget`` and ``SuccessCriteriaMet`` conditions.

A **CronJob** makes a Job from ``spec.jobTemplate`` at every time ``spec.schedule`` names (five
cron fields or a descriptor, in ``spec.timeZone``), as ``concurrencyPolicy`` allows (``Allow``,
``Forbid`` or ``Replace`` a Job still running), keeping the last ``successfulJobsHistoryLimit``
(3) and ``failedJobsHistoryLimit`` (1) finished Jobs; ``status.active`` points at its running Jobs.

Fields follow k8s.io/api batch/v1 types.go (1.32); the status conditions list is ``atomic``
for server-side apply (merged by ``type`` for strategic merge patch), as upstream declares it.
Pod failure and success policies are typed as upstream's (``PodFailurePolicy``, ``SuccessPolicy``):
unknown fields in them are refused under strict field validation.
"""

from __future__ import annotations

from kubesvc.api.kinds.core import CONDITION_STATUS
from kubesvc.api.kinds.meta import LABEL_SELECTOR, OBJECT_META, OBJECT_REFERENCE, kind_schema
from kubesvc.api.kinds.replicationcontroller import POD_TEMPLATE_SPEC
from kubesvc.api.scheme import KindInfo, register
from kubesvc.api.schema import BOOL, INT32, INT64, STRING, TIME, F, ListOf, Obj

BATCH = "io.k8s.api.batch.v1."

POD_FAILURE_POLICY_ON_EXIT_CODES = Obj(
    BATCH + "PodFailurePolicyOnExitCodesRequirement",
    {
        "containerName": F(STRING, "Restricts the check for exit codes to the container with the specified name. When "
                                   "null, the rule applies to all containers."),
        "operator": F(STRING, "Represents the relationship between the container exit code(s) and the specified "
                              "values. Possible values are: In, NotIn."),
        "values": F(ListOf(INT32, "set"), "Specifies the set of values. Each returned container exit code (might be "
                                          "multiple in case of multiple containers) is checked against this set of "
                                          "values with respect to the operator. The list of values must be ordered "
                                          "and must not contain duplicates. Value '0' cannot be used for the In "
                                          "operator. At least one element is required. At most 255 elements are "
                                          "allowed."),
    },
    description="PodFailurePolicyOnExitCodesRequirement describes the requirement for handling a failed pod based on "
                "its container exit codes.",
    required=("operator", "values"),
)

POD_FAILURE_POLICY_ON_POD_CONDITIONS_PATTERN = Obj(
    BATCH + "PodFailurePolicyOnPodConditionsPattern",
    {
        "type": F(STRING, "Specifies the required Pod condition type. To match a pod condition it is required that "
                          "specified type equals the pod condition type."),
        "status": F(STRING, "Specifies the required Pod condition status. To match a pod condition it is required "
                            "that the specified status equals the pod condition status. Defaults to True."),
    },
    description="PodFailurePolicyOnPodConditionsPattern describes a pattern for matching an actual pod condition "
                "type.",
    required=("type",),
)

POD_FAILURE_POLICY_RULE = Obj(
    BATCH + "PodFailurePolicyRule",
    {
        "action": F(STRING, "Specifies the action taken on a pod failure when the requirements are satisfied. "
                            "Possible values are: FailJob, FailIndex, Ignore, Count."),
        "onExitCodes": F(POD_FAILURE_POLICY_ON_EXIT_CODES, "Represents the requirement on the container exit codes."),
        "onPodConditions": F(ListOf(POD_FAILURE_POLICY_ON_POD_CONDITIONS_PATTERN, "atomic"),
                             "Represents the requirement on the pod conditions. The requirement is represented as a "
                             "list of pod condition patterns. The requirement is satisfied if at least one pattern "
                             "matches an actual pod condition. At most 20 elements are allowed."),
    },
    description="PodFailurePolicyRule describes how a pod failure is handled when the requirements are met. One of "
                "onExitCodes and onPodConditions, but not both, can be used in each rule.",
    required=("action",),
)

POD_FAILURE_POLICY = Obj(
    BATCH + "PodFailurePolicy",
    {
        "rules": F(ListOf(POD_FAILURE_POLICY_RULE, "atomic"),
                   "A list of pod failure policy rules. The rules are evaluated in order. Once a rule matches a Pod "
                   "failure, the remaining of the rules are ignored. When no rule matches the Pod failure, the "
                   "default handling applies - the counter of pod failures is incremented and it is checked against "
                   "the backoffLimit. At most 20 elements are allowed."),
    },
    description="PodFailurePolicy describes how failed pods influence the backoffLimit.",
    required=("rules",),
)

SUCCESS_POLICY_RULE = Obj(
    BATCH + "SuccessPolicyRule",
    {
        "succeededIndexes": F(STRING, 'succeededIndexes specifies the set of indexes which need to be contained in the '
                                      'actual set of the succeeded indexes for the Job. The list of indexes must be '
                                      'within 0 to ".spec.completions-1" and must not contain duplicates. At least '
                                      'one element is required. The indexes are represented as intervals separated by '
                                      'commas.'),
        "succeededCount": F(INT32, "succeededCount specified the minimal required size of the actual set of the "
                                   "succeeded indexes for the Job."),
    },
    description='SuccessPolicyRule describes rule for declaring a Job as succeeded. Each rule must have at least one '
                'of the "succeededIndexes" or "succeededCount" specified.',
)

SUCCESS_POLICY = Obj(
    BATCH + "SuccessPolicy",
    {
        "rules": F(ListOf(SUCCESS_POLICY_RULE, "atomic"),
                   "rules represents the list of alternative rules for the declaring the Jobs as successful before "
                   '`.status.succeeded >= .spec.completions`. Once any of the rules are met, the "SuccessCriteriaMet" '
                   'condition is added, and the lingering pods are removed. The terminal state for such a Job has '
                   'the "Complete" condition. Additionally, these rules are evaluated in order; Once the Job meets '
                   "one of the rules, other rules are ignored. At most 20 elements are allowed."),
    },
    description="SuccessPolicy describes when a Job can be declared as succeeded based on the success of some "
                "indexes.",
    required=("rules",),
)


JOB_SPEC = Obj(
    BATCH + "JobSpec",
    {
        "parallelism": F(INT32, "Specifies the maximum desired number of pods the job should run at any given time."),
        "completions": F(INT32, "Specifies the desired number of successfully finished pods the job should be run "
                                "with. Setting to null means that the success of any pod signals the success of all "
                                "pods, and allows parallelism to have any positive value."),
        "activeDeadlineSeconds": F(INT64, "Specifies the duration in seconds relative to the startTime that the job may "
                                          "be continuously active before the system tries to terminate it; value must "
                                          "be positive integer."),
        "podFailurePolicy": F(POD_FAILURE_POLICY, "Specifies the policy of handling failed pods. In particular, it "
                                                  "allows to specify the set of actions and conditions which need to "
                                                  "be satisfied to take the associated action."),
        "successPolicy": F(SUCCESS_POLICY, "successPolicy specifies the policy when the Job can be declared as "
                                           "succeeded. If empty, the default behavior applies - the Job is declared "
                                           "as succeeded only when the number of succeeded pods equals to the "
                                           "completions."),
        "backoffLimit": F(INT32, "Specifies the number of retries before marking this job failed. Defaults to 6"),
        "backoffLimitPerIndex": F(INT32, "Specifies the limit for the number of retries within an index before marking "
                                         "this index as failed."),
        "maxFailedIndexes": F(INT32, "Specifies the maximal number of failed indexes before marking the Job as failed, "
                                     "when backoffLimitPerIndex is set."),
        "selector": F(LABEL_SELECTOR, "A label query over pods that should match the pod count. Normally, the system "
                                      "sets this field for you."),
        "manualSelector": F(BOOL, "manualSelector controls generation of pod labels and pod selectors. Leave "
                                  "`manualSelector` unset unless you are certain what you are doing."),
        "template": F(POD_TEMPLATE_SPEC, 'Describes the pod that will be created when executing a job. The only allowed '
                                         'template.spec.restartPolicy values are "Never" or "OnFailure".'),
        "ttlSecondsAfterFinished": F(INT32, "ttlSecondsAfterFinished limits the lifetime of a Job that has finished "
                                            "execution (either Complete or Failed)."),
        "completionMode": F(STRING, "completionMode specifies how Pod completions are tracked. It can be `NonIndexed` "
                                    "(default) or `Indexed`."),
        "suspend": F(BOOL, "suspend specifies whether the Job controller should create Pods or not."),
        "podReplacementPolicy": F(STRING, "podReplacementPolicy specifies when to create replacement Pods. Possible "
                                          "values are: - TerminatingOrFailed means that we recreate pods when they "
                                          "are terminating (has a metadata.deletionTimestamp) or failed. - Failed "
                                          "means to wait until a previously created Pod is fully terminated (has "
                                          "phase Failed or Succeeded) before creating a replacement Pod."),
        "managedBy": F(STRING, "ManagedBy field indicates the controller that manages a Job."),
    },
    description="JobSpec describes how the job execution will look like.",
    required=("template",),
)

JOB_CONDITION = Obj(
    BATCH + "JobCondition",
    {
        "type": F(STRING, "Type of job condition, Complete or Failed."),
        "status": F(CONDITION_STATUS, "Status of the condition, one of True, False, Unknown."),
        "lastProbeTime": F(TIME, "Last time the condition was checked."),
        "lastTransitionTime": F(TIME, "Last time the condition transit from one status to another."),
        "reason": F(STRING, "(brief) reason for the condition's last transition."),
        "message": F(STRING, "Human readable message indicating details about last transition."),
    },
    description="JobCondition describes current state of a job.",
    required=("type", "status"),
)

UNCOUNTED_TERMINATED_PODS = Obj(
    BATCH + "UncountedTerminatedPods",
    {
        "succeeded": F(ListOf(STRING, "set"), "succeeded holds UIDs of succeeded Pods."),
        "failed": F(ListOf(STRING, "set"), "failed holds UIDs of failed Pods."),
    },
    description="UncountedTerminatedPods holds UIDs of Pods that have terminated but haven't been accounted in Job "
                "status counters.",
)

JOB_STATUS = Obj(
    BATCH + "JobStatus",
    {
        "conditions": F(ListOf(JOB_CONDITION, "atomic", patch_strategy="merge", patch_merge_key="type"),
                        "The latest available observations of an object's current state."),
        "startTime": F(TIME, "Represents time when the job controller started processing a job."),
        "completionTime": F(TIME, "Represents time when the job was completed."),
        "active": F(INT32, "The number of pending and running pods which are not terminating (without a "
                           "deletionTimestamp)."),
        "succeeded": F(INT32, "The number of pods which reached phase Succeeded."),
        "failed": F(INT32, "The number of pods which reached phase Failed."),
        "terminating": F(INT32, "The number of pods which are terminating (in phase Pending or Running and have a "
                                "deletionTimestamp)."),
        "completedIndexes": F(STRING, "completedIndexes holds the completed indexes when .spec.completionMode = "
                                      '"Indexed" in a text format.'),
        "failedIndexes": F(STRING, "FailedIndexes holds the failed indexes when spec.backoffLimitPerIndex is set."),
        "uncountedTerminatedPods": F(UNCOUNTED_TERMINATED_PODS, "uncountedTerminatedPods holds the UIDs of Pods that "
                                                                "have terminated but the job controller hasn't yet "
                                                                "accounted for in the status counters."),
        "ready": F(INT32, "The number of active pods which have a Ready condition and are not terminating (without a "
                          "deletionTimestamp)."),
    },
    description="JobStatus represents the current state of a Job.",
)

JOB = kind_schema(
    BATCH + "Job", ("batch", "v1", "Job"),
    "Job represents the configuration of a single job.",
    {
        "spec": F(JOB_SPEC, "Specification of the desired behavior of a job."),
        "status": F(JOB_STATUS, "Current status of a job."),
    },
)


# ---- CronJob -----------------------------------------------------------------------------------

JOB_TEMPLATE_SPEC = Obj(
    BATCH + "JobTemplateSpec",
    {
        "metadata": F(OBJECT_META, "Standard object's metadata of the jobs created from this template."),
        "spec": F(JOB_SPEC, "Specification of the desired behavior of the job."),
    },
    description="JobTemplateSpec describes the data a Job should have when created from a template",
)

CRON_JOB_SPEC = Obj(
    BATCH + "CronJobSpec",
    {
        "schedule": F(STRING, "The schedule in Cron format, see https://en.wikipedia.org/wiki/Cron."),
        "timeZone": F(STRING, "The time zone name for the given schedule, see "
                              "https://en.wikipedia.org/wiki/List_of_tz_database_time_zones."),
        "startingDeadlineSeconds": F(INT64, "Optional deadline in seconds for starting the job if it misses scheduled "
                                            "time for any reason."),
        "concurrencyPolicy": F(STRING, "Specifies how to treat concurrent executions of a Job. Valid values are: "
                                       '- "Allow" (default): allows CronJobs to run concurrently; - "Forbid": forbids '
                                       "concurrent runs, skipping next run if previous run hasn't finished yet; - "
                                       '"Replace": cancels currently running job and replaces it with a new one'),
        "suspend": F(BOOL, "This flag tells the controller to suspend subsequent executions, it does not apply to "
                           "already started executions. Defaults to false."),
        "jobTemplate": F(JOB_TEMPLATE_SPEC, "Specifies the job that will be created when executing a CronJob."),
        "successfulJobsHistoryLimit": F(INT32, "The number of successful finished jobs to retain. Value must be "
                                               "non-negative integer. Defaults to 3."),
        "failedJobsHistoryLimit": F(INT32, "The number of failed finished jobs to retain. Value must be non-negative "
                                           "integer. Defaults to 1."),
    },
    description="CronJobSpec describes how the job execution will look like and when it will actually run.",
    required=("schedule", "jobTemplate"),
)

CRON_JOB_STATUS = Obj(
    BATCH + "CronJobStatus",
    {
        "active": F(ListOf(OBJECT_REFERENCE), "A list of pointers to currently running jobs."),
        "lastScheduleTime": F(TIME, "Information when was the last time the job was successfully scheduled."),
        "lastSuccessfulTime": F(TIME, "Information when was the last time the job successfully completed."),
    },
    description="CronJobStatus represents the current state of a cron job.",
)

CRON_JOB = kind_schema(
    BATCH + "CronJob", ("batch", "v1", "CronJob"),
    "CronJob represents the configuration of a single cron job.",
    {
        "spec": F(CRON_JOB_SPEC, "Specification of the desired behavior of a cron job, including the schedule."),
        "status": F(CRON_JOB_STATUS, "Current status of a cron job."),
    },
)

register(KindInfo(
    "batch", "v1", "CronJob", "cronjobs", "cronjob", namespaced=True, schema=CRON_JOB, short_names=("cj",),
    categories=("all",), subresources=("status",),
))
register(KindInfo(
    "batch", "v1", "Job", "jobs", "job", namespaced=True, schema=JOB, categories=("all",), subresources=("status",),
    field_labels={"status.successful": ("status", "succeeded")},
))
