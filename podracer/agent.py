"""The agent interface that both runtimes drive.

An agent is written once, for one replica and a batch of environments. Anakin compiles
`act`, `observe` and `update` into one program replicated over devices; Sebulba calls
`act` from actor threads on actor devices and `observe` + `update` on learner devices.
An agent supplies its losses as `podracer.learning.Objective`s and lets
`podracer.learning.gradient_step` take, average (over the replicas both runtimes bind to
the devices that learn) and apply their gradients.
"""

from __future__ import annotations

import abc
from typing import Any, Dict, Mapping, Optional, Tuple, Union

import jax
import jax.numpy as jnp

from podracer import deprecation
from podracer.experience import Replay
from podracer.learning import META, Objective, init_opt_state
from podracer.types import (ILLEGAL, ActorOutput, EnvSpec, PyTree, TimeStep, Trajectory,
                            action_mask)

Metrics = Dict[str, jax.Array]


class Agent(abc.ABC):
  """Acting, experience and learning as pure functions of explicit state.

  The state is split by who touches it (`podracer.types.AgentState`): `actor` (per env,
  owned by actors), `nets` (parameters), `opt` (optimizer state), `experience` (what
  the learner learns from). No method keeps state on `self`; everything is jittable.
  """

  # Entries each trajectory repeats from the end of the previous one, so trajectories
  # are [rollout_length + trajectory_overlap, B]. One gives every transition its
  # bootstrap step; recurrent replay agents ask for more, to burn in their state.
  trajectory_overlap: int = 1

  # The losses `update` minimises, handed to `podracer.learning.gradient_step`; the default
  # `init_opt` keeps one optimizer state per objective.
  objectives: Tuple[Objective, ...] = ()

  # Where experience lives (podracer.experience): None keeps the latest trajectory in
  # the compiled program; a replay component keeps `replay_items` of every trajectory.
  replay: Optional[Replay] = None

  # The network `init_nets` initialises by default (a Haiku transform), if any.
  network: Any = None

  # The actions the agent can take: "discrete" (a DiscreteSpec, `spec.action.num_values`
  # actions), "continuous" (a bounded ArraySpec) or None (either); the builder refuses an
  # environment of the other kind before anything is built.
  action_kind: Optional[str] = "discrete"

  # Whether the agent honours an environment's action mask (`podracer.types.ACTION_MASK`:
  # it never takes an action the mask makes illegal); the builder refuses a masked
  # environment to an agent that does not.
  action_masks: bool = False

  # Rates the metrics derive from env steps/s: {metric: work per env step}, e.g. MuZero's
  # {"simulations_per_s": num_simulations}; every record with `sps` gets each.
  rates_per_env_step: Mapping[str, float] = {}

  # Deprecated here (0.17.0): an agent whose meta-parameters a `meta_loss` adapts is a
  # `podracer.kits.MetaGradientAgent`, which holds the hooks below without warning.
  meta_loss: Any = None

  def __init__(self, spec: EnvSpec, network: Any = None,
               objectives: Tuple[Objective, ...] = (), replay: Optional[Replay] = None):
    self.spec = spec
    self.network = network
    self.objectives = tuple(objectives)
    self.replay = replay

  def add_objective(self, objective: Objective,
                    others_own: Optional[Tuple[str, ...]] = None) -> None:
    """Adds `objective` after the agent's own (a subclass's second loss: RND's predictor,
    an auxiliary task), without knowing how many the agent has. `objective.owns` names
    the top-level nets keys it steps; `others_own` the keys the agent's objectives that
    owned every key (owns=None) own from now on, so that no key is stepped twice (a key
    no objective owns stays fixed: RND's target). Checked when the agent is built
    (podracer/contracts.py `check_objectives`): a key its nets lack, or an objective that
    still owns every key beside another, is one paragraph naming it."""
    own = tuple(o._replace(owns=tuple(others_own)) if o.owns is None and others_own
                else o for o in self.objectives)
    self.objectives = own + (objective,)

  @classmethod
  def gradient_steps_per_update(cls, **config: Any) -> Union[int, Mapping[str, int]]:
    """Optimizer steps one `update` makes, so learning-rate schedules can be sized.

    An int applies to every optimizer; agents whose optimizers step at different rates
    return {constructor parameter: steps}, e.g. {"actor_optimizer": 1, ...}. `config`
    is the `agent` section with the constructor's defaults for the keys it leaves out.
    """
    del config
    return 1

  def policy_lag_corrected(self) -> Optional[int]:
    """The policy lag this agent's learning corrects for: how many updates the parameters
    that acted may trail the ones that learn (`runtime.max_policy_lag` under Sebulba and
    SEED, which refuse a larger one: podracer/contracts.py `check_policy_lag`).

    0: none, a plain on-policy gradient (A2C, REINFORCE), which is biased when the data
    came from older parameters; None: any lag, for objectives weighted by the behaviour
    policy (PPO's clipped ratio, IMPALA's V-trace) and off-policy learning. By default 0
    for an agent without a replay and None with one: override it to declare another.
    """
    return 0 if self.replay is None else None

  def init_nets(self, key: jax.Array) -> PyTree:
    """Network parameters (identical on every replica for the same key).

    By default the parameters of `self.network` (a Haiku transform), initialised on one
    dummy observation; agents with several networks return a dict of them.
    """
    if self.network is None:
      raise NotImplementedError(f"{type(self).__name__} has no `network`: it must define "
                                f"init_nets.")
    return self.network.init(key, dummy_observation(self.spec))

  def expected_outputs(self, batch_size: int) -> Optional[Dict[str, Tuple[Tuple[int, ...], Any]]]:
    """{field: (shape, dtype)} the network must return for `batch_size` observations.

    The builder checks `network_outputs` against it before anything trains
    (podracer/contracts.py); None, the default, checks nothing.
    """
    del batch_size
    return None

  def network_outputs(self, nets: PyTree, observation: PyTree) -> Any:
    """What the network returns for observations [B, ...], for the contract check."""
    return self.network.apply(nets, observation)

  def init_opt(self, nets: PyTree) -> PyTree:
    """Optimizer (and other learner) state for `nets`; by default, one optimizer state
    per objective (`podracer.learning.init_opt_state` of `self.objectives`)."""
    opt = init_opt_state(self.objectives, nets)
    if self.meta_loss is not None:  # Deprecated: a MetaGradientAgent's (podracer.kits).
      _moved_to_kit("Agent.init_opt's meta-parameters' state")
      opt[META] = self.meta_loss.init(self.meta_values())
    return opt

  def meta_values(self) -> Dict[str, Any]:
    """Deprecated (0.17.0): `podracer.kits.MetaGradientAgent.meta_values`."""
    _moved_to_kit("Agent.meta_values")
    return {}

  def learning_batch(self, trajectory: PyTree, values: Mapping[str, Any]) -> PyTree:
    """Deprecated (0.17.0): `podracer.kits.MetaGradientAgent.learning_batch`."""
    del trajectory, values
    _moved_to_kit("Agent.learning_batch")
    raise NotImplementedError(f"{type(self).__name__} takes no `meta_loss`: it has no "
                              "learning_batch.")

  def adapted(self, nets: PyTree, opt: PyTree, trajectory: PyTree
              ) -> Tuple[Dict[str, Any], PyTree, Metrics]:
    """Deprecated (0.17.0): `podracer.kits.MetaGradientAgent.adapted`."""
    _moved_to_kit("Agent.adapted")
    if self.meta_loss is None:
      return self.meta_values(), opt, {}
    return self.meta_loss.step(self, nets, opt, trajectory)

  def init_actor(self, key: jax.Array, num_envs: int) -> PyTree:
    """Per-environment actor state (recurrent state, exploration); none by default."""
    del key, num_envs
    return ()

  def actor_metrics(self, actor_state: PyTree) -> Dict[str, jax.Array]:
    """Scalars of the actors' state for the records ({name: value}), read by the runtime
    where the actors run, once a trajectory (e.g. R2D2's `epsilon_mean`); none by
    default. A pure function of one actor's state ([B, ...] leaves)."""
    del actor_state
    return {}

  def init_experience(self, trajectory_spec: Trajectory) -> PyTree:
    """Experience state, given the shapes of one trajectory ([T+K, B, ...]).

    By default: with no `replay`, room for the latest trajectory (on-policy); with one,
    the replay's state for items of `replay_items`'s shapes.
    """
    if self.replay is None:
      return jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), trajectory_spec)
    return self.replay.init(item_spec(self, trajectory_spec))

  @abc.abstractmethod
  def act(self, nets: PyTree, actor_state: PyTree, timestep: TimeStep,
          key: jax.Array) -> Tuple[ActorOutput, PyTree]:
    """Actions for a batch of timesteps [B, ...], and the next actor state."""

  def init_eval_actor(self, key: jax.Array, num_envs: int) -> PyTree:
    """The evaluation policy's actor state (podracer/lifecycle/evaluation.py); `init_actor`'s by
    default."""
    return self.init_actor(key, num_envs)

  def eval_act(self, nets: PyTree, actor_state: PyTree, timestep: TimeStep,
               key: jax.Array) -> Tuple[ActorOutput, PyTree]:
    """The evaluation policy (podracer/lifecycle/evaluation.py): by default the training policy,
    `act`; actor-critic agents act greedily (the logits' argmax, a Gaussian's mean)."""
    return self.act(nets, actor_state, timestep, key)

  @abc.abstractmethod
  def observe(self, experience: PyTree, trajectory: Trajectory) -> PyTree:
    """Adds one trajectory to the experience (keeps it, or writes it to replay)."""

  def replay_items(self, trajectory: Trajectory) -> PyTree:
    """What one trajectory adds to the replay, batch-major: [B, ...] items, one per env.

    By default each environment's whole [T+K] stretch of the trajectory is one item.
    """
    return jax.tree.map(lambda x: jnp.swapaxes(x, 0, 1), trajectory)

  @abc.abstractmethod
  def update(self, nets: PyTree, opt: PyTree, experience: PyTree,
             key: jax.Array) -> Tuple[PyTree, PyTree, PyTree, Metrics]:
    """One learner update; `podracer.learning.gradient_step` applies the objectives."""


def legal(values: jax.Array, observation: PyTree) -> jax.Array:
  """Logits or Q-values [..., A] with each illegal action's at `ILLEGAL`, where the
  observation carries an action mask (`podracer.types.ACTION_MASK`); unchanged where it
  does not. Sampling, argmax and max over the result pick legal actions only."""
  mask = action_mask(observation)
  if mask is None:
    return values
  return jnp.where(mask, values, jnp.asarray(ILLEGAL, values.dtype))


def random_legal(key: jax.Array, mask: jax.Array) -> jax.Array:
  """Uniformly random legal actions (int32 [...]) of action masks [..., A]."""
  return jax.random.categorical(key, jnp.where(mask, 0.0, ILLEGAL)).astype(jnp.int32)


def greedy(logits: jax.Array) -> ActorOutput:
  """The most probable of categorical actions, as an evaluation policy returns them."""
  return ActorOutput(jnp.argmax(logits, axis=-1).astype(jnp.int32), {})


def dummy_observation(spec: EnvSpec) -> PyTree:
  """A batch of one zero observation, to initialise networks with."""
  return jax.tree.map(lambda s: jnp.zeros((1, *s.shape), s.dtype), spec.observation)


def item_spec(agent: Agent, trajectory_spec: Trajectory) -> PyTree:
  """Shapes of ONE replay item (no batch axis) of a trajectory of `trajectory_spec`."""
  return jax.eval_shape(lambda t: jax.tree.map(lambda x: x[0], agent.replay_items(t)),
                        trajectory_spec)


def _moved_to_kit(name: str) -> None:
  deprecation.warn_once(name, deprecation.renamed_message(
      name, "podracer.kits.MetaGradientAgent (subclass it)", "0.17.0"), stacklevel=4)
